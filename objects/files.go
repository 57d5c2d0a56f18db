package objects

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/values"
)

// Set is a collection of this API's objects, as read from files.
type Set struct {
	Backends      []kvv1.KVCacheBackend
	Pools         []kvv1.KVCachePool
	Bindings      []kvv1.KVCachePoolBinding
	InstanceTypes []kvv1.InstanceType
	Settings      []kvv1.Setting
}

// Concat is s followed by t, kind by kind.
func (s Set) Concat(t Set) Set {
	return Set{
		Backends: slices.Concat(s.Backends, t.Backends), Pools: slices.Concat(s.Pools, t.Pools),
		Bindings: slices.Concat(s.Bindings, t.Bindings), InstanceTypes: slices.Concat(s.InstanceTypes, t.InstanceTypes),
		Settings: slices.Concat(s.Settings, t.Settings),
	}
}

// FileOptions say what a Files reader assumes about the cluster the files stand for.
type FileOptions struct {
	// ChartSettings: a Setting the files do not hold reads as the chart's default (what a
	// default install plus these objects holds); otherwise as absent.
	ChartSettings bool
	// SystemNamespace is where managed stores run, for the pool status derived from a backend;
	// "" means generator.DefaultSystemNamespace.
	SystemNamespace string
	// Defaults are the renderer's constants (the store's ports).
	Defaults values.Defaults
}

// Files reads the objects a CLI run was given. A pool that carries no status gets the status
// the operator would publish for it over its backend (DerivePoolStatus), so a manifest written
// by hand resolves like the live object.
type Files struct {
	set  Set
	opts FileOptions
}

var _ Reader = (*Files)(nil)

// NewFiles indexes set; the objects are copied, so later changes to set do not show.
func NewFiles(set Set, o FileOptions) *Files {
	f := &Files{opts: o, set: Set{
		Backends: slices.Clone(set.Backends), Bindings: slices.Clone(set.Bindings),
		InstanceTypes: slices.Clone(set.InstanceTypes), Settings: slices.Clone(set.Settings),
	}}
	for i := range set.Pools {
		p := set.Pools[i].DeepCopy()
		if len(p.Status.Conditions) == 0 && p.Status.ClientEndpoint == "" {
			if j := slices.IndexFunc(set.Backends, func(b kvv1.KVCacheBackend) bool { return b.Name == p.BackendName() }); j >= 0 {
				DerivePoolStatus(p, &set.Backends[j], o.SystemNamespace, o.Defaults)
			}
		}
		f.set.Pools = append(f.set.Pools, *p)
	}
	return f
}

// DerivePoolStatus fills what the operator publishes for a pool whose backend is configured as
// given: the backend's Client endpoint, and QuotaLedgerAvailable True when the store keeps a
// tenant ledger (managed with multi-tenancy, or external) or False/MultiTenancyDisabled.
func DerivePoolStatus(p *kvv1.KVCachePool, b *kvv1.KVCacheBackend, systemNamespace string, d values.Defaults) {
	cond := metav1.Condition{Type: kvv1.ConditionQuotaLedgerAvailable, Status: metav1.ConditionTrue, Reason: kvv1.ReasonLedgerObserved, Message: "derived from the backend's spec: the store keeps a tenant ledger"}
	if m := b.Spec.Connection.Managed; m != nil {
		if systemNamespace == "" {
			systemNamespace = generator.DefaultSystemNamespace
		}
		p.Status.ClientEndpoint = generator.ClientEndpoint(b.Name, systemNamespace, d)
		if !m.Leader.MultiTenancyEnabled() {
			cond = metav1.Condition{Type: kvv1.ConditionQuotaLedgerAvailable, Status: metav1.ConditionFalse, Reason: kvv1.ReasonMultiTenancyDisabled, Message: NoLedgerMessage(b.Name)}
		}
	} else if e := b.Spec.Connection.External; e != nil {
		for _, ep := range e.Endpoints {
			if ep.Name == kvv1.EndpointClient {
				p.Status.ClientEndpoint = ep.Address
			}
		}
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
}

// NoLedgerMessage is QuotaLedgerAvailable's message for a pool whose backend keeps no tenant
// ledger, offline and live alike.
func NoLedgerMessage(backend string) string {
	return fmt.Sprintf("KVCacheBackend %s keeps no tenant ledger: ceilings are not enforced, and the master ignores the tenant engines are given: every write lands in its default tenant", backend)
}

func find[T any](items []T, match func(*T) bool) (*T, bool) {
	for i := range items {
		if match(&items[i]) {
			return &items[i], true
		}
	}
	return nil, false
}

// Setting implements Reader.
func (f *Files) Setting(_ context.Context, name string) (string, bool, error) {
	if s, ok := find(f.set.Settings, func(s *kvv1.Setting) bool { return s.Name == name }); ok {
		return s.Spec.Value, true, nil
	}
	if f.opts.ChartSettings {
		v, ok := kvv1.SettingCatalog()[name]
		return v, ok, nil
	}
	return "", false, nil
}

// Backend implements Reader.
func (f *Files) Backend(_ context.Context, name string) (*kvv1.KVCacheBackend, bool, error) {
	if b, ok := find(f.set.Backends, func(b *kvv1.KVCacheBackend) bool { return b.Name == name }); ok {
		return b.DeepCopy(), true, nil
	}
	return nil, false, nil
}

// Pool implements Reader.
func (f *Files) Pool(_ context.Context, name string) (*kvv1.KVCachePool, bool, error) {
	if p, ok := find(f.set.Pools, func(p *kvv1.KVCachePool) bool { return p.Name == name }); ok {
		return p.DeepCopy(), true, nil
	}
	return nil, false, nil
}

// Pools implements Reader.
func (f *Files) Pools(context.Context) ([]kvv1.KVCachePool, error) {
	return deepCopies(f.set.Pools, (*kvv1.KVCachePool).DeepCopy), nil
}

// Binding implements Reader.
func (f *Files) Binding(_ context.Context, namespace, name string) (*kvv1.KVCachePoolBinding, bool, error) {
	if b, ok := find(f.set.Bindings, func(b *kvv1.KVCachePoolBinding) bool { return b.Namespace == namespace && b.Name == name }); ok {
		return b.DeepCopy(), true, nil
	}
	return nil, false, nil
}

// Bindings implements Reader, in file order.
func (f *Files) Bindings(context.Context) ([]kvv1.KVCachePoolBinding, error) {
	return deepCopies(f.set.Bindings, (*kvv1.KVCachePoolBinding).DeepCopy), nil
}

// BindingsOf implements Reader, in file order.
func (f *Files) BindingsOf(_ context.Context, pool string) ([]kvv1.KVCachePoolBinding, error) {
	var out []kvv1.KVCachePoolBinding
	for i := range f.set.Bindings {
		if f.set.Bindings[i].Spec.PoolRef.Name == pool {
			out = append(out, *f.set.Bindings[i].DeepCopy())
		}
	}
	return out, nil
}

// InstanceType implements Reader.
func (f *Files) InstanceType(_ context.Context, name string) (*kvv1.InstanceType, bool, error) {
	if t, ok := find(f.set.InstanceTypes, func(t *kvv1.InstanceType) bool { return t.Name == name }); ok {
		return t.DeepCopy(), true, nil
	}
	return nil, false, nil
}

func deepCopies[T any](items []T, cp func(*T) *T) []T {
	out := make([]T, len(items))
	for i := range items {
		out[i] = *cp(&items[i])
	}
	return out
}
