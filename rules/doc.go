// Package rules owns the admission rules that read objects other than the one judged: a pool's
// backend must exist, a domain is registered once per store master, a backend keeps its ledger
// while pools use it, a ModelDeployment's engines must take its Binding's transport and dtype.
// Each kind has one function that gathers what its rules refer to through an objects.Reader and
// returns a Verdict. The admission webhooks call them with the cluster (objects.Cluster),
// `kvcache render` and `kvcache check -f` with the files they were given (objects.Files); so the
// two cannot disagree.
//
// The rules of one object alone live in api/v1/validation; these functions run those too.
package rules
