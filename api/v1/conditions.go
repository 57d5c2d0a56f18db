package v1

// Condition types, by kind. They are API: users' scripts and dashboards read them.
const (
	// KVCacheBackend.
	ConditionLeaderAvailable  = "LeaderAvailable"
	ConditionCapacityObserved = "CapacityObserved"
	ConditionMembersMounted   = "MembersMounted"
	ConditionElectionObserved = "ElectionObserved"
	ConditionRolloutComplete  = "RolloutComplete"
	ConditionDeletable        = "Deletable"

	// KVCachePool.
	ConditionBackendResolved      = "BackendResolved"
	ConditionQuotaLedgerAvailable = "QuotaLedgerAvailable"
	ConditionQuotaWithinTotal     = "QuotaWithinTotal"
	ConditionCapacityAllocatable  = "CapacityAllocatable"

	// KVCachePoolBinding.
	ConditionQuotaGranted    = "QuotaGranted"
	ConditionDomainExclusive = "DomainExclusive"
	ConditionReleasable      = "Releasable"

	// ModelDeployment.
	ConditionCacheAttached = "CacheAttached"
)

// Condition reasons other components act on.
const (
	// ReasonMultiTenancyDisabled on QuotaLedgerAvailable=False: the backend keeps no tenant
	// ledger, so injection writes no tenant and Bindings are Unenforced.
	ReasonMultiTenancyDisabled = "MultiTenancyDisabled"
)

// Finalizers.
const (
	// FinalizerBackend holds a backend while pools use it.
	FinalizerBackend = "worker.gpustack.ai/kvcache-backend"
	// FinalizerBinding holds a Binding until its ledger entry is released.
	FinalizerBinding = "worker.gpustack.ai/tenant-ledger"
)
