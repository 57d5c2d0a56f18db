// Package operator holds the controllers of kvcache-operator: backend (renders and applies the
// managed store, observes it through its admin API), pool (pool status and the tenants deleted
// Bindings leave), binding (a Binding's finalizer, its tenant's ledger entry and its status),
// modeldeployment, the one view of each master's ledger the pool and Binding controllers share
// (operator/storeview); the Mooncake admin client they call is the leaf package store. This
// package itself owns what they share: server-side apply that undoes drift without writing in
// steady state, finalizers changed under an optimistic lock, the rate limit of usage figures in
// status, store error descriptions, the writes seen per tenant
// (TenantActivity) and the verdicts made of them (CacheUse, Eviction), the Pods that use a
// Binding, and the figures each poll reads exported as Prometheus series (Observations).
package operator
