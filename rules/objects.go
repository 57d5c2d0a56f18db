package rules

import (
	"context"
	"fmt"
	"slices"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Objects is what the rules read. A getter's found is false when the object does not exist;
// err is a read that failed for another reason, which refuses the request (a rule that cannot
// be checked cannot be passed).
type Objects interface {
	Setting(ctx context.Context, name string) (value string, found bool, err error)
	Backend(ctx context.Context, name string) (*kvv1.KVCacheBackend, bool, error)
	Pool(ctx context.Context, name string) (*kvv1.KVCachePool, bool, error)
	Pools(ctx context.Context) ([]kvv1.KVCachePool, error)
	Binding(ctx context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error)
	Bindings(ctx context.Context) ([]kvv1.KVCachePoolBinding, error)
	InstanceType(ctx context.Context, name string) (*kvv1.InstanceType, bool, error)
}

// ReadError is a read that failed: the webhooks answer it as an internal error, naming what
// could not be read.
type ReadError struct {
	What string
	Err  error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("could not read %s: %v; the request is refused until it can be checked, retry when the API server answers", e.What, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

func readError(what string, err error) error { return &ReadError{What: what, Err: err} }

// Files are the objects a CLI run was given. With ChartSettings, a Setting the files do not hold
// reads as the chart's default (what a default install plus these objects holds); without it,
// as absent (what a cluster without the Setting holds).
type Files struct {
	Backends      []kvv1.KVCacheBackend
	PoolList      []kvv1.KVCachePool
	BindingList   []kvv1.KVCachePoolBinding
	InstanceTypes []kvv1.InstanceType
	Settings      []kvv1.Setting
	ChartSettings bool
}

var _ Objects = (*Files)(nil)

// Setting implements Objects.
func (f *Files) Setting(_ context.Context, name string) (string, bool, error) {
	for _, s := range f.Settings {
		if s.Name == name {
			return s.Spec.Value, true, nil
		}
	}
	if f.ChartSettings {
		v, ok := kvv1.SettingCatalog()[name]
		return v, ok, nil
	}
	return "", false, nil
}

// Backend implements Objects.
func (f *Files) Backend(_ context.Context, name string) (*kvv1.KVCacheBackend, bool, error) {
	i := slices.IndexFunc(f.Backends, func(b kvv1.KVCacheBackend) bool { return b.Name == name })
	if i < 0 {
		return nil, false, nil
	}
	return f.Backends[i].DeepCopy(), true, nil
}

// Pool implements Objects.
func (f *Files) Pool(_ context.Context, name string) (*kvv1.KVCachePool, bool, error) {
	i := slices.IndexFunc(f.PoolList, func(p kvv1.KVCachePool) bool { return p.Name == name })
	if i < 0 {
		return nil, false, nil
	}
	return f.PoolList[i].DeepCopy(), true, nil
}

// Pools implements Objects.
func (f *Files) Pools(context.Context) ([]kvv1.KVCachePool, error) {
	return slices.Clone(f.PoolList), nil
}

// Binding implements Objects.
func (f *Files) Binding(_ context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error) {
	i := slices.IndexFunc(f.BindingList, func(b kvv1.KVCachePoolBinding) bool { return b.Namespace == namespace && b.Name == name })
	if i < 0 {
		return nil, false, nil
	}
	return f.BindingList[i].DeepCopy(), true, nil
}

// Bindings implements Objects.
func (f *Files) Bindings(context.Context) ([]kvv1.KVCachePoolBinding, error) {
	return slices.Clone(f.BindingList), nil
}

// InstanceType implements Objects.
func (f *Files) InstanceType(_ context.Context, name string) (*kvv1.InstanceType, bool, error) {
	i := slices.IndexFunc(f.InstanceTypes, func(t kvv1.InstanceType) bool { return t.Name == name })
	if i < 0 {
		return nil, false, nil
	}
	return f.InstanceTypes[i].DeepCopy(), true, nil
}
