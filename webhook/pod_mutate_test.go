package webhook

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/vocab"
)

// A request whose object is not a Pod is answered 400 with the decode error, and counted as
// an error, not as a refusal of the Pod.
func TestPodMutatorAnswersUndecodableObjectsWithBadRequest(t *testing.T) {
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	m := NewPodMutator(injection.New(r), walkthroughLookup(r))
	admit := func(raw string) Outcome {
		return m.Admit(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Namespace: "team-a", Object: runtime.RawExtension{Raw: []byte(raw)},
		}})
	}
	for name, raw := range map[string]string{
		"no object":      "",
		"not JSON":       "{",
		"a field's type": `{"kind":"Pod","apiVersion":"v1","spec":{"containers":"server"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			o := admit(raw)
			assert.Equal(t, OutcomeError, o.Result)
			assert.Equal(t, "DecodeError", o.Reason)
			assert.False(t, o.Response.Allowed)
			assert.Equal(t, int32(http.StatusBadRequest), o.Response.Result.Code)
		})
	}
	// Decoding is case sensitive, as the API server's serializer: "Metadata" is an unknown
	// field, so the labels under it do not opt the Pod in.
	o := admit(`{"kind":"Pod","apiVersion":"v1","Metadata":{"labels":{"` + vocab.LabelInject + `":"true"}}}`)
	assert.Equal(t, OutcomeIgnored, o.Result)
}
