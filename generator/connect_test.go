package generator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Every store client dials the master with the bound values/defaults.yaml gives: each engine's
// fragment as a default (the container's own value wins), each member unless its group's
// extraEnv sets one, which is then the only entry.
func TestClientsDialTheMasterWithABound(t *testing.T) {
	r, err := NewRenderer()
	require.NoError(t, err)
	want := "1000"
	require.EqualValues(t, 1000, r.Defaults().Store.ClientConnectTimeoutMS)
	for _, e := range []engines.Engine{engines.VLLM, engines.SGLang, engines.VLLMAscend} {
		f, err := r.RenderFragment(FragmentInput{Engine: e, CacheInput: CacheInput{Master: "m:50051", Protocol: "tcp", Tenant: "default"}})
		require.NoError(t, err)
		assert.Contains(t, f.DefaultEnv, corev1.EnvVar{Name: vocab.RPCConnectTimeoutEnv, Value: want}, e.Name)
	}

	memberEnv := func(extra ...corev1.EnvVar) []corev1.EnvVar {
		b := walkthroughBackend()
		b.Spec.Connection.Managed.Members[0].ExtraEnv = extra
		_, objs := renderPolicy(t, StoreInput{Backend: b})
		for _, o := range objs {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				return ds.Spec.Template.Spec.Containers[0].Env
			}
		}
		require.FailNow(t, "no member DaemonSet")
		return nil
	}
	named := func(env []corev1.EnvVar) []corev1.EnvVar {
		var out []corev1.EnvVar
		for _, e := range env {
			if e.Name == vocab.RPCConnectTimeoutEnv {
				out = append(out, e)
			}
		}
		return out
	}
	assert.Equal(t, []corev1.EnvVar{{Name: vocab.RPCConnectTimeoutEnv, Value: want}}, named(memberEnv()))
	own := corev1.EnvVar{Name: vocab.RPCConnectTimeoutEnv, Value: "5000"}
	assert.Equal(t, []corev1.EnvVar{own}, named(memberEnv(own)), "the group's own bound, once")
}
