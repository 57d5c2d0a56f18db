// Package injection is the one injection function of this project: given a Pod that opted in
// with the kvcache.gpustack.ai/inject label, it checks every rule of the contract, resolves the
// Binding, pool and backend it names through a Lookup, and returns the Pod with its engine's
// client configuration merged in, or a Refusal saying why not and how to fix it.
//
// The admission webhook calls it with a Lookup over the API server; `kvcache inject` calls it
// with a Lookup over files. Every check runs before any mutation, and the input Pod is never
// modified: a refused Pod is unchanged.
package injection
