package generator_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The webhook partial is the one template that spells vocabulary itself: Helm renders it for
// the chart with no Go values. Every Pod webhook must select exactly the labels injection and
// the freeze read, or a Pod would be injected by one and ignored by the other.
func TestWebhookSelectorsSpellTheContractsLabels(t *testing.T) {
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	objs, err := r.RenderWebhookConfigurations(generator.WebhookInput{Name: "kvcache", Namespace: "kvcache-system", Service: "kvcache-webhook"})
	require.NoError(t, err)
	var keys []string
	for _, o := range objs {
		switch c := o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for _, w := range c.Webhooks {
				for _, e := range w.ObjectSelector.MatchExpressions {
					keys = append(keys, e.Key)
				}
			}
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			for _, w := range c.Webhooks {
				if w.ObjectSelector == nil {
					continue
				}
				for _, e := range w.ObjectSelector.MatchExpressions {
					keys = append(keys, e.Key)
				}
			}
		}
	}
	require.Equal(t, []string{vocab.LabelInject, vocab.LabelInject, vocab.LabelModelDeployment}, keys)
}
