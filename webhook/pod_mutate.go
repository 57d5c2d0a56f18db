package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
)

// PodMutator is the Pod mutating webhook: it injects opted-in Pods and refuses, with the
// reason, every opted-in Pod that would start normally and cache nothing.
type PodMutator struct {
	Injector *injection.Injector
	Objects  objects.Reader
}

// NewPodMutator returns the handler.
func NewPodMutator(inj *injection.Injector, r objects.Reader) *PodMutator {
	return &PodMutator{Injector: inj, Objects: r}
}

// NotOptedIn is the message of an admission that left a Pod alone.
const NotOptedIn = "not opted in to KV cache injection"

// Outcomes of an admission, as metrics count them.
const (
	OutcomeAdmitted = "admitted"
	OutcomeRefused  = "refused"
	OutcomeIgnored  = "ignored"
	OutcomeError    = "error"
)

// Outcome of one admission: the response, what kind of answer it is, and the refusal class.
type Outcome struct {
	Response admission.Response
	Result   string
	Reason   string
}

func admitted(r admission.Response) Outcome { return Outcome{Response: r, Result: OutcomeAdmitted} }

func refused(msg, reason string) Outcome {
	return Outcome{Response: Refused(msg), Result: OutcomeRefused, Reason: reason}
}

func errored(code int32, err error, reason string) Outcome {
	return Outcome{Response: admission.Errored(code, err), Result: OutcomeError, Reason: reason}
}

// Handle implements admission.Handler.
func (m *PodMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return m.Admit(ctx, req).Response
}

// Admit decides one request and says why.
func (m *PodMutator) Admit(ctx context.Context, req admission.Request) Outcome {
	pod, err := decodePod(req)
	if err != nil {
		return errored(http.StatusBadRequest, err, "DecodeError")
	}
	if !injection.OptedIn(pod) {
		// The objectSelector keeps such Pods away; should one arrive, it is told the same as
		// kvcache inject and kvcache check tell it.
		resp := admission.Allowed(NotOptedIn)
		if w := injection.LeftAlone(pod); w != "" {
			resp.Warnings = []string{w}
		}
		return Outcome{Response: resp, Result: OutcomeIgnored}
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	res, err := m.Injector.Inject(ctx, pod, ns, m.Objects)
	var rf *injection.Refusal
	if errors.As(err, &rf) {
		return refused(rf.Message, rf.Reason)
	}
	if err != nil {
		return errored(http.StatusInternalServerError, err, "InternalError")
	}
	// Injection's own edits are the patch; a Pod resubmitted as injection writes it gets none.
	resp := admission.Patched("", res.Patch...)
	resp.Warnings = res.Warnings
	return admitted(resp)
}

// Refused is a denial with HTTP 403 semantics carrying msg verbatim: the API server shows it
// to the user as the reason the object was not created.
func Refused(msg string) admission.Response { return admission.Denied(msg) }

// decodePod reads the request's Pod the way the API server's JSON serializer does (case
// sensitive, integers kept), without first parsing the document again for its kind: the
// webhook is registered for Pods only, and that parse is a tenth of an admission's time.
func decodePod(req admission.Request) (*corev1.Pod, error) {
	if len(req.Object.Raw) == 0 {
		return nil, errors.New("the admission request carries no object")
	}
	pod := &corev1.Pod{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, pod); err != nil {
		return nil, fmt.Errorf("decode the Pod: %w", err)
	}
	return pod, nil
}
