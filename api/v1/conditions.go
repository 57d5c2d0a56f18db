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
	// ConditionWritesAttributed is False while the master holds writes under the tenant
	// default and no Binding on the backend names that domain: an engine ignores the tenant
	// injection gave it.
	ConditionWritesAttributed = "WritesAttributed"
	// ConditionUpdatePending is True while a new operator version's changes to the store's
	// Pods wait (spec.connection.managed.operatorUpdates: Deferred), naming what would change.
	ConditionUpdatePending = "UpdatePending"
	// ConditionNetworkPolicyEnforced says whether the cluster enforces the store's
	// NetworkPolicy, as the manager measures it: a connection it opens to the serving master's
	// RPC port, which the policy does not admit it to, must go unanswered.
	ConditionNetworkPolicyEnforced = "NetworkPolicyEnforced"

	// KVCachePool.
	ConditionBackendResolved      = "BackendResolved"
	ConditionQuotaLedgerAvailable = "QuotaLedgerAvailable"
	ConditionQuotaWithinTotal     = "QuotaWithinTotal"
	ConditionCapacityAllocatable  = "CapacityAllocatable"

	// KVCachePoolBinding.
	ConditionQuotaGranted    = "QuotaGranted"
	ConditionDomainExclusive = "DomainExclusive"
	ConditionReleasable      = "Releasable"
	// ConditionCacheInUse says whether the tenant of a Binding with Pods is written: False
	// once its Pods have been Ready for the configured window and the store saw no write
	// under the tenant. Unknown (never False) while no Pod uses the Binding.
	ConditionCacheInUse = "CacheInUse"
	// ConditionEvictingOwnObjects is True while the domain is at its grant and the store
	// evicts the domain's own older objects to admit its new writes.
	ConditionEvictingOwnObjects = "EvictingOwnObjects"
	// ConditionInjectionCurrent is False while Pods injected through the Binding run a
	// configuration injection no longer writes (status.drift names them).
	ConditionInjectionCurrent = "InjectionCurrent"

	// ModelDeployment.
	ConditionCacheAttached = "CacheAttached"
)

// Condition reasons other components act on.
const (
	// ReasonMultiTenancyDisabled on QuotaLedgerAvailable=False: the backend keeps no tenant
	// ledger (the master ignores the tenant injection writes), so Bindings are Unenforced.
	ReasonMultiTenancyDisabled = "MultiTenancyDisabled"
)

// Finalizers.
const (
	// FinalizerBackend holds a backend while pools use it.
	FinalizerBackend = "worker.gpustack.ai/kvcache-backend"
	// FinalizerBinding holds a Binding until its ledger entry is released.
	FinalizerBinding = "worker.gpustack.ai/tenant-ledger"
	// FinalizerPool holds a pool until the ledger entries of its Bindings are deleted from the
	// backend's master: a deleted pool's tenants must not stay in the ledger, where they would
	// keep taking part in the proportional cut of every other tenant's grant.
	FinalizerPool = "worker.gpustack.ai/pool-ledger"
)
