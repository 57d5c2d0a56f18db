// Package rules owns the admission rules that read objects other than the one judged: a pool's
// backend must exist, a domain is registered once per store master, a backend keeps its ledger
// while pools use it, a ModelDeployment's engines must take its Binding's transport and dtype.
// Each kind has one function that gathers what its rules refer to through Objects and returns a
// Verdict. The admission webhooks call them with the cluster (webhook adapts a client.Reader),
// `kvcache render` with the files it was given (Files); so the two cannot disagree.
//
// The rules of one object alone live in api/v1/validation; these functions run those too.
package rules
