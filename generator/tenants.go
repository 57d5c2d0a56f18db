package generator

import (
	"sort"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// DomainHolders decides which Binding holds each domain on a backend's master, keyed by
// domain: the oldest claim, then namespace/name. Admission refuses a second claim on a domain;
// two created in the same instant can slip through, and the later one is then left out of the
// ledger (its pool reports it) and of the seed. Bindings of pools on other backends are ignored.
func DomainHolders(backend string, pools []kvv1.KVCachePool, bindings []kvv1.KVCachePoolBinding) map[string]*kvv1.KVCachePoolBinding {
	onBackend := map[string]bool{}
	for _, p := range pools {
		if len(p.Spec.Backends) == 1 && p.Spec.Backends[0] == backend {
			onBackend[p.Name] = true
		}
	}
	var claims []*kvv1.KVCachePoolBinding
	for i := range bindings {
		if onBackend[bindings[i].Spec.PoolRef.Name] {
			claims = append(claims, &bindings[i])
		}
	}
	sort.Slice(claims, func(i, j int) bool {
		ti, tj := claims[i].CreationTimestamp, claims[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return claims[i].Namespace+"/"+claims[i].Name < claims[j].Namespace+"/"+claims[j].Name
	})
	holders := map[string]*kvv1.KVCachePoolBinding{}
	for _, b := range claims {
		if _, held := holders[b.DomainName()]; !held {
			holders[b.DomainName()] = b
		}
	}
	return holders
}

// TenantsFor lists the ledger entries a backend's master should hold: one per domain, requesting
// its holder's ceiling (DomainHolders).
func TenantsFor(backend string, pools []kvv1.KVCachePool, bindings []kvv1.KVCachePoolBinding) []Tenant {
	var out []Tenant
	for name, b := range DomainHolders(backend, pools, bindings) {
		out = append(out, Tenant{Name: name, QuotaBytes: b.Spec.Quota.Ceiling.Value()})
	}
	return sortedTenants(out)
}
