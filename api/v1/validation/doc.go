// Package validation holds the rules for this API that need no cluster: pure functions over
// one object (and, where a rule compares two, the object it refers to). `kvcache render` runs
// them on its input and the admission webhooks run them on every write, so a manifest is judged
// the same way on a laptop and in the cluster.
//
// Every message names the field and says how to fix it.
package validation
