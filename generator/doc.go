// Package generator is the one render engine of this project. It parses the embedded
// templates/ once (Helm's dialect: sprig's hermetic functions plus include, required, tpl,
// toYaml and friends, missingkey=error), renders them with typed values it builds in Go from
// the API objects, and decodes the output into typed Kubernetes objects sorted in install
// order, then by namespace and name.
//
// The operator renders store objects through it at reconcile time and the `kvcache` CLI renders
// the same objects for review: there is no second renderer. Decisions (arguments, environment,
// sizes, which objects exist) are made here in Go; templates only lay the values out.
package generator
