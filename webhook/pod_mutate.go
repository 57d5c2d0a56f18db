package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kvcache-operator/kvcache/injection"
)

// PodMutator is the Pod mutating webhook: it injects opted-in Pods and refuses, with the
// reason, every opted-in Pod that would start normally and cache nothing.
type PodMutator struct {
	Injector *injection.Injector
	Lookup   injection.Lookup
	decoder  admission.Decoder
}

// NewPodMutator returns the handler; decoder decodes Pods from admission requests.
func NewPodMutator(inj *injection.Injector, lookup injection.Lookup, decoder admission.Decoder) *PodMutator {
	return &PodMutator{Injector: inj, Lookup: lookup, decoder: decoder}
}

// Outcome of one admission, for metrics: the response and the refusal class ("" when none).
type Outcome struct {
	Response admission.Response
	Reason   string
}

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return m.Admit(ctx, req).Response
}

// Admit decides one request and says why.
func (m *PodMutator) Admit(ctx context.Context, req admission.Request) Outcome {
	pod := &corev1.Pod{}
	if err := m.decoder.Decode(req, pod); err != nil {
		return Outcome{Response: admission.Errored(http.StatusBadRequest, err), Reason: "DecodeError"}
	}
	if !injection.OptedIn(pod) {
		return Outcome{Response: admission.Allowed("not opted in to KV cache injection")}
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	out, res, err := m.Injector.Inject(ctx, pod, ns, m.Lookup)
	var rf *injection.Refusal
	if errors.As(err, &rf) {
		return Outcome{Response: Refused(rf.Message), Reason: rf.Reason}
	}
	if err != nil {
		return Outcome{Response: admission.Errored(http.StatusInternalServerError, err), Reason: "InternalError"}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return Outcome{Response: admission.Errored(http.StatusInternalServerError, err), Reason: "InternalError"}
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, raw)
	resp.Warnings = res.Warnings
	return Outcome{Response: resp}
}

// Refused is a denial with HTTP 403 semantics carrying msg verbatim: the API server shows it
// to the user as the reason the object was not created.
func Refused(msg string) admission.Response { return admission.Denied(msg) }
