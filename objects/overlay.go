package objects

import (
	"context"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Overlay reads through Reader, except for the objects it holds, which read as held: what a
// reconcile computed and is about to publish (a pool with its new status), so that a question
// asked of it now is answered as the cluster will answer it after the write. Lists come from
// Reader.
type Overlay struct {
	Reader
	Held Held
}

// Held are the objects an Overlay answers for itself (nil entries are ignored).
type Held struct {
	Backends []*kvv1.KVCacheBackend
	Pools    []*kvv1.KVCachePool
	Bindings []*kvv1.KVCachePoolBinding
}

// Backend implements Reader.
func (o Overlay) Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, bool, error) {
	for _, b := range o.Held.Backends {
		if b != nil && b.Name == name {
			return b.DeepCopy(), true, nil
		}
	}
	return o.Reader.Backend(ctx, name)
}

// Pool implements Reader.
func (o Overlay) Pool(ctx context.Context, name string) (*kvv1.KVCachePool, bool, error) {
	for _, p := range o.Held.Pools {
		if p != nil && p.Name == name {
			return p.DeepCopy(), true, nil
		}
	}
	return o.Reader.Pool(ctx, name)
}

// Binding implements Reader.
func (o Overlay) Binding(ctx context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error) {
	for _, b := range o.Held.Bindings {
		if b != nil && b.Namespace == namespace && b.Name == name {
			return b.DeepCopy(), true, nil
		}
	}
	return o.Reader.Binding(ctx, namespace, name)
}
