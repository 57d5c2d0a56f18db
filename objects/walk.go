package objects

import (
	"context"
	"fmt"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Chain is what a Binding attaches to: its pool and the pool's backend.
type Chain struct {
	Binding *kvv1.KVCachePoolBinding
	Pool    *kvv1.KVCachePool
	Backend *kvv1.KVCacheBackend
}

// Links of a chain, for a Break.
const (
	LinkBinding = "KVCachePoolBinding"
	LinkPool    = "KVCachePool"
	LinkBackend = "KVCacheBackend"
)

// Break is the first link of a chain that does not resolve, and what to do about it.
type Break struct {
	// Link is the kind that is missing (LinkBinding, LinkPool or LinkBackend).
	Link    string
	Message string
}

// Walk follows Binding namespace/name to its pool and backend. namedBy is the field that named
// the Binding, for the fix the message states (a Pod's annotation, a ModelDeployment's
// poolRef). With attaching, a Binding being deleted ends the walk (nothing may newly attach to
// it, whatever the rest of the chain says): the chain holds the Binding alone and the caller
// refuses it. The chain holds every link read so far, also when it breaks; a read that failed
// is an error (a *ReadError), never a Break.
func Walk(ctx context.Context, r Reader, namespace, name, namedBy string, attaching bool) (Chain, *Break, error) {
	var c Chain
	b, found, err := r.Binding(ctx, namespace, name)
	if err != nil {
		return c, nil, ReadFailed(fmt.Sprintf("KVCachePoolBinding %s/%s", namespace, name), err)
	}
	if !found {
		return c, &Break{Link: LinkBinding, Message: fmt.Sprintf("KVCachePoolBinding %q not found in namespace %q: create it there (an administrator grants a namespace a pool with a Binding), or fix %s", name, namespace, namedBy)}, nil
	}
	c.Binding = b
	if attaching && b.DeletionTimestamp != nil {
		return c, nil, nil
	}
	poolName := b.Spec.PoolRef.Name
	p, found, err := r.Pool(ctx, poolName)
	if err != nil {
		return c, nil, ReadFailed("KVCachePool "+poolName, err)
	}
	if !found {
		return c, &Break{Link: LinkPool, Message: fmt.Sprintf("KVCachePool %q, named by KVCachePoolBinding %s/%s, does not exist; ask an administrator to create it or to fix the Binding's spec.poolRef", poolName, namespace, name)}, nil
	}
	c.Pool = p
	backend := p.BackendName()
	if backend == "" {
		return c, &Break{Link: LinkBackend, Message: fmt.Sprintf("KVCachePool %q names %d backends; a pool needs exactly one", poolName, len(p.Spec.Backends))}, nil
	}
	be, found, err := r.Backend(ctx, backend)
	if err != nil {
		return c, nil, ReadFailed("KVCacheBackend "+backend, err)
	}
	if !found {
		return c, &Break{Link: LinkBackend, Message: fmt.Sprintf("KVCacheBackend %q, the backend of KVCachePool %q, does not exist; ask an administrator to create it", backend, poolName)}, nil
	}
	c.Backend = be
	return c, nil, nil
}
