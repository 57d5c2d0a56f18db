// Package webhook adapts this project's rules to Kubernetes admission: the Pod mutating webhook
// (the injection package's one function behind an AdmissionReview), the Pod update freeze, and
// the validators of this API's kinds. It owns decoding, patches, warnings and metrics; the rules
// themselves live in injection and api/v1/validation.
package webhook
