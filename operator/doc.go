// Package operator holds the controllers of kvcache-operator: backend (renders and applies the
// managed store, observes it through its admin API), pool (pool status, the tenant ledger,
// Binding status and finalizers), and the Mooncake admin client in operator/store.
package operator
