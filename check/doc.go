// Package check owns `kvcache check`: it diagnoses a live cluster (the webhooks answer with a CA
// that verifies their certificate, the manager and every store leader hold their Leases, members
// are mounted on the nodes their groups select, Bindings have their tenants and are written to,
// injected Pods still match what injection writes now, engines and stores are on one Mooncake
// line) or a set of manifests (every admission rule and injection), and reports one finding per
// line: PASS, WARN or FAIL, the object, and the fix. It reads; it never writes, apart from a
// server-side dry-run create that proves the Pod webhook answers.
package check
