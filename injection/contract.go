package injection

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/vocab"
)

// acceptedAnnotations are the keys under vocab.Prefix a Pod may carry.
var acceptedAnnotations = []string{vocab.AnnotationBinding, vocab.AnnotationEngine, vocab.AnnotationRole, vocab.AnnotationContainer, vocab.AnnotationLaunchArgsForwarded, vocab.AnnotationConfigFileReviewed}

// Refusal reasons: stable classes, counted by metrics and shown in messages' origin.
const (
	ReasonAnnotation           = "AnnotationInvalid"
	ReasonDomainAnnotation     = "DomainAnnotation"
	ReasonContainer            = "ContainerAmbiguous"
	ReasonBindingNotFound      = "BindingNotFound"
	ReasonBindingDeleting      = "BindingDeleting"
	ReasonPoolNotFound         = "PoolNotFound"
	ReasonLedgerNotAvailable   = "QuotaLedgerNotAvailable"
	ReasonBackendNotFound      = "BackendNotFound"
	ReasonNoEndpoint           = "EndpointNotPublished"
	ReasonTransportMixed       = "NotSupportedTransport"
	ReasonTransportUnsupported = "TransportUnsupported"
	ReasonDtypeUnsupported     = "DtypeUnsupported"
	ReasonReleaseUnsupported   = "ReleaseUnsupported"
	ReasonConfigVolume         = "ConfigVolumeConflict"
	ReasonLookupFailed         = "LookupFailed"
)

// Record is the kvcache.gpustack.ai/injected annotation: what was decided. Field order is the
// JSON order. There is no engineVersion: it described the upstream source the injector was
// written against, not the image in the Pod, and readers must not infer compatibility from it.
type Record struct {
	Binding             string `json:"binding"`
	Engine              string `json:"engine"`
	Vehicle             string `json:"vehicle"`
	Domain              string `json:"domain"`
	TenantInjected      bool   `json:"tenantInjected"`
	LaunchProgram       string `json:"launchProgram"`
	LaunchArgsForwarded bool   `json:"launchArgsForwarded"`
}

// RecordOf reads the injection record a Pod carries; false when it carries none (or one that
// does not parse).
func RecordOf(p *corev1.Pod) (Record, bool) {
	var rec Record
	raw, ok := p.Annotations[vocab.AnnotationInjected]
	if !ok || json.Unmarshal([]byte(raw), &rec) != nil {
		return Record{}, false
	}
	return rec, true
}

// Refusal is why a Pod is refused. Message names the key and the fix; Reason is a stable class.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Message }

func refuse(reason, format string, a ...any) *Refusal {
	return &Refusal{Reason: reason, Message: sprintf(format, a...)}
}
