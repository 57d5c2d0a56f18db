package v1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultDomainName is the domain a Binding registers when spec.domain.name is left out. It is
// also the tenant the store uses for a writer that names none.
const DefaultDomainName = "default"

// KVCachePoolBindingSpec grants this namespace a quota ceiling on a pool and registers one reuse
// domain.
type KVCachePoolBindingSpec struct {
	// PoolRef names the KVCachePool. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.poolRef is immutable: create a new KVCachePoolBinding for another pool"
	PoolRef LocalReference `json:"poolRef"`

	// Quota of this namespace on the pool.
	Quota BindingQuota `json:"quota"`

	// Domain is the cache's compatibility key: workloads sharing a domain share cached blocks.
	// Every field is immutable, because an editable domain would let a running workload read
	// blocks another tokenizer wrote. A second model gets a second Binding.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.domain is immutable (name, blockSize, dtype): create a new KVCachePoolBinding for a different domain"
	Domain Domain `json:"domain"`
}

// BindingQuota is a request, not a reservation.
type BindingQuota struct {
	// Ceiling is the most this namespace may hold at once; at most the pool's total. Going over
	// it does not fail a write: the store evicts this domain's own objects. When ceilings
	// oversubscribe the store, grants are cut in proportion.
	Ceiling resource.Quantity `json:"ceiling"`
}

// Domain is a reuse domain: the store tenant engines write under.
type Domain struct {
	// Name of the domain and store tenant; a DNS-1123 label, unique per store master.
	// +kubebuilder:default=default
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Name string `json:"name,omitempty"`

	// BlockSize in tokens of the engines sharing this domain.
	// +kubebuilder:validation:Minimum=1
	BlockSize int32 `json:"blockSize"`

	// Dtype of the KV cache, lowercase, handed verbatim to engines as --kv-cache-dtype.
	// +kubebuilder:validation:MinLength=1
	Dtype string `json:"dtype"`
}

// KVCachePoolBindingStatus is observed from the store's tenant ledger.
type KVCachePoolBindingStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the conditions.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Conditions: QuotaGranted, DomainExclusive, CacheInUse, EvictingOwnObjects,
	// InjectionCurrent, Releasable (while deleting).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// EffectiveQuota is the grant the store computed for this domain; absent when the backend
	// keeps no ledger.
	// +optional
	EffectiveQuota *resource.Quantity `json:"effectiveQuota,omitempty"`
	// Usage is what the domain holds in the store. It moves with every write an engine makes,
	// so while it keeps moving it is rewritten at most every 5 minutes (at once when it
	// crosses zero); the master's own /metrics carries it as it moves.
	// +optional
	Usage *resource.Quantity `json:"usage,omitempty"`
	// UsageObservedTime is when Usage was read from the store's ledger.
	// +optional
	UsageObservedTime *metav1.Time `json:"usageObservedTime,omitempty"`
	// Evicted is the bytes the store evicted from this domain to admit the domain's own new
	// writes while it was at its grant, counted by the master since it started (the tenant's
	// eviction counter). Rate-limited as Usage is; the master's /metrics and the operator's
	// kvcache_binding_evicted_bytes_total carry it as it moves.
	// +optional
	Evicted *resource.Quantity `json:"evicted,omitempty"`
	// EvictedObservedTime is when Evicted was read from the store.
	// +optional
	EvictedObservedTime *metav1.Time `json:"evictedObservedTime,omitempty"`
	// Drift counts the running Pods injected through this Binding whose written
	// configuration is no longer what injection writes now; absent when there are none.
	// +optional
	Drift *BindingDrift `json:"drift,omitempty"`
	// UsedBy lists the workloads attached through this Binding.
	// +optional
	// +listType=atomic
	UsedBy []ObjectReference `json:"usedBy,omitempty"`
	// StoreHits is how much of what the engines using this Binding were asked the store served,
	// from the engines' own counters: the master stores blocks and never sees a request.
	// Absent until an engine Pod's counters were read.
	// +optional
	StoreHits *StoreHits `json:"storeHits,omitempty"`
}

// StoreHits is what engine Pods report about the store over a window, from their own /metrics
// (vLLM: vllm:prompt_tokens_total and vllm:external_prefix_cache_hits_total; SGLang, started
// with --enable-metrics: sglang:prompt_tokens_total and sglang:cached_tokens_total with
// cache_source storage), read by the operator from each Pod's IP. While the figures keep
// moving they are rewritten at most every 5 minutes; the operator's metrics carry them as
// they move.
type StoreHits struct {
	// Window is how far back the figures reach (the manager's --hit-rate-window); less when
	// the Pods were first read later than that (Since).
	Window metav1.Duration `json:"window"`
	// Since is when the figures start.
	Since metav1.Time `json:"since"`
	// PromptTokens is the prompt tokens the engines were asked to prefill.
	PromptTokens int64 `json:"promptTokens"`
	// StoreTokens is the prompt tokens they loaded from the store instead of computing them.
	StoreTokens int64 `json:"storeTokens"`
	// Ratio is StoreTokens of PromptTokens in percent, one decimal ("97.3%"); absent while no
	// prompt token was asked.
	// +optional
	Ratio string `json:"ratio,omitempty"`
	// Pods is how many engine Pods were read.
	Pods int32 `json:"pods"`
	// Unread is how many Ready engine Pods could not be read; Message says why.
	// +optional
	Unread int32 `json:"unread,omitempty"`
	// Message says what could not be read, and why.
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedTime is when the figures were computed.
	ObservedTime metav1.Time `json:"observedTime"`
}

// BindingDrift names the Pods whose injected configuration is stale. Injection runs only when
// a Pod is created, so they keep it until their workload is rolled.
type BindingDrift struct {
	// Pods is how many Pods drifted.
	Pods int32 `json:"pods"`
	// Names of the first of them (at most 10), sorted.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Names []string `json:"names,omitempty"`
}

// KVCachePoolBinding grants its namespace access to a pool: the authorization point.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=kvcpb,categories=kvcache
// +kubebuilder:selectablefield:JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Domain",type=string,JSONPath=`.spec.domain.name`
// +kubebuilder:printcolumn:name="Effective",type=string,JSONPath=`.status.effectiveQuota`
// +kubebuilder:printcolumn:name="Usage",type=string,JSONPath=`.status.usage`
// +kubebuilder:printcolumn:name="Hit Rate",type=string,JSONPath=`.status.storeHits.ratio`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KVCachePoolBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the grant.
	Spec KVCachePoolBindingSpec `json:"spec"`
	// Status is observed.
	// +optional
	Status KVCachePoolBindingStatus `json:"status,omitempty"`
}

// KVCachePoolBindingList is a list of KVCachePoolBindings.
// +kubebuilder:object:root=true
type KVCachePoolBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVCachePoolBinding `json:"items"`
}
