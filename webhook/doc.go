// Package webhook adapts this project's rules to Kubernetes admission: the Pod mutating webhook
// (the injection package's one function behind an AdmissionReview, answering with the patch
// injection returns), the Pod update freeze, and the validators of this API's kinds (one thin
// file each). It owns decoding, the answers, warnings and metrics; the rules themselves live in
// injection, rules and api/v1/validation, where the CLI calls them too.
package webhook
