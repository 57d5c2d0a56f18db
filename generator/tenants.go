package generator

import (
	"fmt"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// TenantsFor lists the ledger entries a backend's master should hold: one per Binding whose
// pool divides that backend, named by the Binding's domain and requesting its ceiling. Two
// Bindings registering the same domain on one master are an error naming both.
func TenantsFor(backend string, pools []kvv1.KVCachePool, bindings []kvv1.KVCachePoolBinding) ([]Tenant, error) {
	onBackend := map[string]bool{}
	for _, p := range pools {
		if len(p.Spec.Backends) == 1 && p.Spec.Backends[0] == backend {
			onBackend[p.Name] = true
		}
	}
	holder := map[string]string{}
	var out []Tenant
	for _, b := range bindings {
		if !onBackend[b.Spec.PoolRef.Name] {
			continue
		}
		name := b.Spec.Domain.Name
		if name == "" {
			name = kvv1.DefaultDomainName
		}
		who := b.Namespace + "/" + b.Name
		if h, ok := holder[name]; ok {
			return nil, fmt.Errorf("KVCachePoolBinding %s: domain %q is already registered on the master of KVCacheBackend %s by KVCachePoolBinding %s; name a different spec.domain.name", who, name, backend, h)
		}
		holder[name] = who
		out = append(out, Tenant{Name: name, QuotaBytes: b.Spec.Quota.Ceiling.Value()})
	}
	return sortedTenants(out), nil
}
