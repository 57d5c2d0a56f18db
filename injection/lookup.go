package injection

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/values"
)

// StaticLookup resolves from a fixed set of objects: what `kvcache inject --cluster` reads.
type StaticLookup struct {
	bindings   map[string]*kvv1.KVCachePoolBinding
	pools      map[string]*kvv1.KVCachePool
	backends   map[string]*kvv1.KVCacheBackend
	dtypeOwned bool
}

var _ Lookup = (*StaticLookup)(nil)

// NewStaticLookup indexes the given objects. A pool without status gets the status the operator
// would publish for it (see DerivePoolStatus); systemNamespace is where managed stores run.
func NewStaticLookup(backends []kvv1.KVCacheBackend, pools []kvv1.KVCachePool, bindings []kvv1.KVCachePoolBinding, settings []kvv1.Setting, systemNamespace string, d values.Defaults) *StaticLookup {
	l := &StaticLookup{
		bindings: map[string]*kvv1.KVCachePoolBinding{}, pools: map[string]*kvv1.KVCachePool{},
		backends: map[string]*kvv1.KVCacheBackend{}, dtypeOwned: true,
	}
	for i := range backends {
		l.backends[backends[i].Name] = &backends[i]
	}
	for i := range bindings {
		l.bindings[bindings[i].Namespace+"/"+bindings[i].Name] = &bindings[i]
	}
	for i := range pools {
		p := pools[i].DeepCopy()
		if len(p.Status.Conditions) == 0 && p.Status.ClientEndpoint == "" && len(p.Spec.Backends) == 1 {
			if b, ok := l.backends[p.Spec.Backends[0]]; ok {
				DerivePoolStatus(p, b, systemNamespace, d)
			}
		}
		l.pools[p.Name] = p
	}
	for _, s := range settings {
		if s.Name == kvv1.SettingKVCacheDtypeOwned {
			l.dtypeOwned = kvv1.DtypeOwned(s.Spec.Value)
		}
	}
	return l
}

// DerivePoolStatus fills what the operator publishes for a pool whose backend is configured as
// given: the backend's Client endpoint, and QuotaLedgerAvailable True when the store keeps a
// tenant ledger (managed with multi-tenancy, or external) or False/MultiTenancyDisabled.
func DerivePoolStatus(p *kvv1.KVCachePool, b *kvv1.KVCacheBackend, systemNamespace string, d values.Defaults) {
	cond := metav1.Condition{Type: ConditionQuotaLedgerAvailable, Status: metav1.ConditionTrue, Reason: "LedgerObserved", Message: "derived from the backend's spec: the store keeps a tenant ledger"}
	if m := b.Spec.Connection.Managed; m != nil {
		if systemNamespace == "" {
			systemNamespace = generator.DefaultSystemNamespace
		}
		p.Status.ClientEndpoint = generator.ClientEndpoint(b.Name, systemNamespace, d)
		if !m.Leader.MultiTenancyEnabled() {
			cond = metav1.Condition{Type: ConditionQuotaLedgerAvailable, Status: metav1.ConditionFalse, Reason: ReasonMultiTenancyDisabled, Message: "the backend's leader runs without multi-tenancy"}
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

func notFound(resource, name string) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: kvv1.GroupVersion.Group, Resource: resource}, name)
}

// Binding implements Lookup.
func (l *StaticLookup) Binding(_ context.Context, ns, name string) (*kvv1.KVCachePoolBinding, error) {
	if b, ok := l.bindings[ns+"/"+name]; ok {
		return b, nil
	}
	return nil, notFound("kvcachepoolbindings", name)
}

// Pool implements Lookup.
func (l *StaticLookup) Pool(_ context.Context, name string) (*kvv1.KVCachePool, error) {
	if p, ok := l.pools[name]; ok {
		return p, nil
	}
	return nil, notFound("kvcachepools", name)
}

// Backend implements Lookup.
func (l *StaticLookup) Backend(_ context.Context, name string) (*kvv1.KVCacheBackend, error) {
	if b, ok := l.backends[name]; ok {
		return b, nil
	}
	return nil, notFound("kvcachebackends", name)
}

// DtypeOwned implements Lookup.
func (l *StaticLookup) DtypeOwned(context.Context) (bool, error) { return l.dtypeOwned, nil }
