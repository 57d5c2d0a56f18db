// Package operator holds the controllers of kvcache-operator: backend (renders and applies the
// managed store, observes it through its admin API), pool (pool status, the tenant ledger,
// Binding status and finalizers), modeldeployment, and the Mooncake admin client in
// operator/store. This package itself owns what they share: server-side apply that undoes
// drift without writing in steady state, finalizers changed under an optimistic lock, the rate
// limit of usage figures in status, and store error descriptions.
package operator
