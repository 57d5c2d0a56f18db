// Package objects owns how this project reads its own API objects (KVCacheBackends, pools,
// Bindings, InstanceTypes, Settings): one Reader interface with two implementations, the
// cluster (Cluster: the manager's cache first, a live read on a miss) and files (Files: the
// manifests a CLI run was given, with pool status derived as the operator would publish it),
// and the questions every reader of them asks answered once: the pools on a backend, the
// Bindings on a backend, a Binding's chain to its store (Walk), the Settings, and the input of a
// backend's store render (StoreInput). Injection, the admission rules, `kvcache check`, the
// operator and the CLI all read through it, so a webhook, a controller and a CLI run given the
// same objects cannot answer differently.
package objects
