package generator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

func tenantBinding(ns, name, pool, domain, ceiling string, created time.Time) kvv1.KVCachePoolBinding {
	return kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: pool},
			Quota:   kvv1.BindingQuota{Ceiling: resource.MustParse(ceiling)},
			Domain:  kvv1.Domain{Name: domain},
		},
	}
}

// The seed and the ledger follow one rule: each domain on a master is held by its oldest claim,
// whatever order the Bindings are listed in; a second claim (admission refuses it, a race can
// let it through) is left out rather than dropping the seed.
func TestTenantsForKeepsTheOldestClaimOfEachDomain(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// The Bindings of the backend's two pools.
	bindings := []kvv1.KVCachePoolBinding{
		tenantBinding("team-b", "late", "spare-dram", "chat", "2Gi", t0.Add(time.Minute)),
		tenantBinding("team-a", "chat", "shared-dram", "chat", "8Gi", t0),
		tenantBinding("team-c", "plain", "shared-dram", "", "4Gi", t0),
	}
	want := []Tenant{{Name: "chat", QuotaBytes: 8 << 30}, {Name: "default", QuotaBytes: 4 << 30}}
	assert.Equal(t, want, TenantsFor(bindings))
	reversed := []kvv1.KVCachePoolBinding{bindings[2], bindings[1], bindings[0]}
	assert.Equal(t, want, TenantsFor(reversed), "listing order does not decide")

	holders := DomainHolders(bindings)
	assert.Equal(t, "team-a/chat", holders["chat"].Namespace+"/"+holders["chat"].Name)
	assert.Len(t, holders, 2)

	// Claims of the same instant: namespace/name decides.
	tie := []kvv1.KVCachePoolBinding{
		tenantBinding("team-z", "chat", "shared-dram", "chat", "1Gi", t0),
		tenantBinding("team-a", "chat", "shared-dram", "chat", "8Gi", t0),
	}
	assert.Equal(t, []Tenant{{Name: "chat", QuotaBytes: 8 << 30}}, TenantsFor(tie))
}
