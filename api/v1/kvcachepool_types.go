package v1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KVCachePoolSpec declares a quota over one backend.
type KVCachePoolSpec struct {
	// Backends names the KVCacheBackend this pool divides: exactly one, immutable.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.backends is immutable: create a new KVCachePool for another backend"
	// +listType=atomic
	Backends []string `json:"backends"`

	// Quota of the pool.
	Quota PoolQuota `json:"quota"`
}

// PoolQuota is the total the Bindings of a pool may request together.
type PoolQuota struct {
	// Total is the pool's quota. Binding ceilings may not exceed it one by one; together they
	// may oversubscribe it, which the pool reports.
	Total resource.Quantity `json:"total"`
}

// PoolUsage is what the store reports the pool's domains hold.
type PoolUsage struct {
	// Total bytes held by the pool's domains. It moves with every write an engine makes, so
	// while it keeps moving it is rewritten at most every 5 minutes (at once when it crosses
	// zero); the master's own /metrics carries it as it moves.
	// +optional
	Total *resource.Quantity `json:"total,omitempty"`
	// ObservedTime is when Total was read from the store's ledger.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// KVCachePoolStatus is observed from the backend and its tenant ledger.
type KVCachePoolStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Conditions: BackendResolved, QuotaLedgerAvailable, QuotaWithinTotal, CapacityAllocatable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ClientEndpoint is the backend's Client endpoint, which injection hands to engines.
	// +optional
	ClientEndpoint string `json:"clientEndpoint,omitempty"`
	// Usage of the pool as the store reports it.
	// +optional
	Usage PoolUsage `json:"usage,omitempty"`
	// Domains registered by the pool's Bindings.
	// +optional
	// +listType=atomic
	Domains []string `json:"domains,omitempty"`
	// UsedBy lists the Bindings of this pool.
	// +optional
	// +listType=atomic
	UsedBy []ObjectReference `json:"usedBy,omitempty"`
	// Releasing are the tenants of deleted Bindings that still own objects on the master: the
	// ones a reader holds a lease on, which the master removes only once the lease ends (its
	// default_kv_lease_ttl after the last read). The pool removes them, and the ledger entry,
	// as soon as the master allows it; nothing waits for it.
	// +optional
	// +listType=map
	// +listMapKey=tenant
	Releasing []ReleasingTenant `json:"releasing,omitempty"`
}

// ReleasingTenant is the tenant of a deleted Binding whose last objects are still leased.
type ReleasingTenant struct {
	Tenant string `json:"tenant"`
	// Binding that registered it (namespace/name).
	Binding string `json:"binding"`
	// Since is when the Binding's deletion released it.
	Since metav1.Time `json:"since"`
}

// KVCachePool is a quota over exactly one KVCacheBackend, granted to namespaces by
// KVCachePoolBindings.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=kvcp,categories=kvcache
// +kubebuilder:printcolumn:name="Quota",type=string,JSONPath=`.spec.quota.total`
// +kubebuilder:printcolumn:name="Usage",type=string,JSONPath=`.status.usage.total`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.clientEndpoint`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KVCachePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the pool.
	Spec KVCachePoolSpec `json:"spec"`
	// Status is observed.
	// +optional
	Status KVCachePoolStatus `json:"status,omitempty"`
}

// KVCachePoolList is a list of KVCachePools.
// +kubebuilder:object:root=true
type KVCachePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVCachePool `json:"items"`
}
