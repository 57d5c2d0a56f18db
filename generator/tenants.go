package generator

import (
	"sort"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// DomainHolders decides which of the Bindings on one backend's master (every Binding of every
// pool on it) holds each domain, keyed by domain: the oldest claim, then namespace/name.
// Admission refuses a second claim on a domain; two created in the same instant can slip
// through, and the later one is then left out of the ledger (its pool reports it) and of the
// seed.
func DomainHolders(onBackend []kvv1.KVCachePoolBinding) map[string]*kvv1.KVCachePoolBinding {
	claims := make([]*kvv1.KVCachePoolBinding, len(onBackend))
	for i := range onBackend {
		claims[i] = &onBackend[i]
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

// TenantsFor lists the ledger entries a backend's master should hold, given the Bindings on it:
// one per domain, requesting its holder's ceiling (DomainHolders).
func TenantsFor(onBackend []kvv1.KVCachePoolBinding) []Tenant {
	var out []Tenant
	for name, b := range DomainHolders(onBackend) {
		out = append(out, Tenant{Name: name, QuotaBytes: b.Spec.Quota.Ceiling.Value()})
	}
	return sortedTenants(out)
}
