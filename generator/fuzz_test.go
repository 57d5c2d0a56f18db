package generator

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Every string a tenant or an administrator writes into an object reaches the rendered objects
// as a value and only as a value: whatever it holds (newlines, ':', '#', "{{", quotes), the
// render holds exactly that string where a placeholder would be, and the objects have the same
// shape as with the placeholder. Strings validation refuses are not rendered at all.

// marker is the placeholder of fuzzed string i.
func marker(i int) string { return fmt.Sprintf("kvfuzzmarker%d", i) }

// substituted returns v (decoded JSON) with every marker in a string or a map key replaced by its
// fuzzed value (a value may be part of a string, as in -flag=value).
func substituted(v any, values []string) any {
	sub := func(s string) string {
		for i, x := range values {
			s = strings.ReplaceAll(s, marker(i), x)
		}
		return s
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[sub(k)] = substituted(x, values)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = substituted(x, values)
		}
		return out
	case string:
		return sub(t)
	}
	return v
}

// asJSON is the rendered objects as one decoded JSON document, without the hashes the render
// stamps (digests of the values, so they differ by design).
func asJSON(t *testing.T, objs []Object) any {
	t.Helper()
	b, err := json.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	dropHash(v)
	return v
}

func dropHash(v any) {
	switch t := v.(type) {
	case map[string]any:
		for _, h := range []string{vocab.LabelPodSpecHash, vocab.AnnotationTemplateHash, vocab.AnnotationAppliedHash, vocab.AnnotationSpecHash} {
			delete(t, h)
		}
		for _, x := range t {
			dropHash(x)
		}
	case []any:
		for _, x := range t {
			dropHash(x)
		}
	}
}

// checkValuesOnly renders with the markers and with the fuzzed values and requires the second to
// be the first with each marker replaced by its value.
func checkValuesOnly(t *testing.T, values []string, render func(vals []string) ([]Object, error)) {
	t.Helper()
	markers := make([]string, len(values))
	for i := range values {
		markers[i] = marker(i)
	}
	want, err := render(markers)
	if err != nil {
		t.Fatalf("render with placeholders: %v", err)
	}
	got, err := render(values)
	if err != nil {
		t.Fatalf("strings validation admits did not render: %v (values %q)", err, values)
	}
	if w, g := pruneEmpty(substituted(asJSON(t, want), values)), pruneEmpty(asJSON(t, got)); !reflect.DeepEqual(w, g) {
		wb, _ := json.MarshalIndent(w, "", " ")
		gb, _ := json.MarshalIndent(g, "", " ")
		t.Fatalf("a string became more than a value (values %q):\nwant %s\ngot  %s", values, wb, gb)
	}
}

// pruneEmpty drops empty strings, maps and lists from map values: the API's JSON omits an empty
// field, so a value of "" and no value are the same object.
func pruneEmpty(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range t {
			x = pruneEmpty(x)
			switch e := x.(type) {
			case string:
				if e == "" {
					continue
				}
			case map[string]any:
				if len(e) == 0 {
					continue
				}
			case []any:
				if len(e) == 0 {
					continue
				}
			}
			out[k] = x
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = pruneEmpty(x)
		}
		return out
	}
	return v
}

func valid(values ...string) bool {
	for _, v := range values {
		// The API server stores valid UTF-8 only.
		if !utf8.ValidString(v) {
			return false
		}
	}
	return true
}

func fuzzBackend(vals []string) *kvv1.KVCacheBackend {
	b := walkthroughBackend()
	b.Spec.Image = vals[0]
	m := b.Spec.Connection.Managed
	m.Leader.ExtraEnv = []corev1.EnvVar{{Name: "GLOG_v", Value: vals[1]}}
	m.Leader.ExtraArgs = []string{"-default_kv_lease_ttl=" + vals[2]}
	g := &m.Members[0]
	g.Image = vals[3]
	g.NodeSelector = map[string]string{"pool": vals[4]}
	g.ExtraArgs = []string{vals[5]}
	g.ExtraEnv = []corev1.EnvVar{{Name: "MC_LOG_LEVEL", Value: vals[6]}}
	b.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: vals[7]}}
	return b
}

func FuzzStoreRenderKeepsStringsAsValues(f *testing.F) {
	for _, s := range [][8]string{
		{"gpustack/mooncake:1", "2", "10m", "mooncake:2", "gpu", "--max-wait-time=5", "INFO", "regcred"},
		{"evil:1\n          securityContext: {privileged: true}", "a: b", "#x", "{{ .Name }}", "'\"", "x\ny: z", "\"}]", "n: m"},
		{"x:1", "]\n- name: X\n  value: y", "", "a", "true", "--port=1", "null", "{}"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	r, err := NewRenderer()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s0, s1, s2, s3, s4, s5, s6, s7 string) {
		values := []string{s0, s1, s2, s3, s4, s5, s6, s7}
		// An empty image is no value: the image falls back to the next one in precedence.
		if !valid(values...) || s0 == "" || s3 == "" {
			return
		}
		if errs := validation.ValidateBackend(fuzzBackend(values), validation.BackendContext{BackendImageSetting: kvv1.DefaultKVCacheBackendImage}); len(errs) > 0 {
			return
		}
		checkValuesOnly(t, values, func(vals []string) ([]Object, error) {
			return r.RenderStore(StoreInput{Backend: fuzzBackend(vals), BackendImageSetting: kvv1.DefaultKVCacheBackendImage})
		})
	})
}

func fuzzDeployment(vals []string) ModelDeploymentInput {
	md := &kvv1.ModelDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "qwen-chat", UID: "2c1f4a4e-0000-4000-8000-000000000002"},
		Spec: kvv1.ModelDeploymentSpec{
			Model:  kvv1.Model{Name: vals[0]},
			Engine: kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
			Roles: []kvv1.Role{{
				Name: "server", Image: vals[1], InstanceType: "gpu",
				Env:       []corev1.EnvVar{{Name: "HF_HOME", Value: vals[2]}},
				ExtraArgs: []string{"--served-model-name", vals[3]},
				Resources: kvv1.RoleResources{Accelerator: 1},
			}},
		},
	}
	md.Default()
	it := &kvv1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: kvv1.InstanceTypeSpec{
		NodeSelector: map[string]string{"gpu": vals[4]},
		Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: vals[5], Effect: corev1.TaintEffectNoSchedule}},
		Accelerator:  &kvv1.Accelerator{ResourceName: "nvidia.com/gpu", Manufacturer: kvv1.ManufacturerNVIDIA},
	}}
	q := resource.MustParse("16Gi")
	it.Spec.MemoryPerAccelerator = &q
	return ModelDeploymentInput{
		Deployment: md, InstanceTypes: map[string]*kvv1.InstanceType{"gpu": it},
		Cache: &CacheInput{Master: "mooncake-dram-leader.gpustack-system.svc:50051", Protocol: "tcp", Tenant: "team-a", Dtype: "bfloat16"},
	}
}

func FuzzModelDeploymentRenderKeepsStringsAsValues(f *testing.F) {
	for _, s := range [][6]string{
		{"Qwen/Qwen2.5-7B-Instruct", "vllm/vllm-openai:v0.29.0", "/data", "chat", "h100", "present"},
		{"m\n    securityContext: {privileged: true}", "evil:1\n          securityContext: {privileged: true}", "{{ .Values }}", "'\"#", "a: b", "]}"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	r, err := NewRenderer()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s0, s1, s2, s3, s4, s5 string) {
		values := []string{s0, s1, s2, s3, s4, s5}
		// An empty role image is no value: the engine's default image is used.
		if !valid(values...) || s1 == "" {
			return
		}
		if errs := validation.ValidateModelDeployment(fuzzDeployment(values).Deployment); len(errs) > 0 {
			return
		}
		checkValuesOnly(t, values, func(vals []string) ([]Object, error) {
			return r.RenderModelDeployment(fuzzDeployment(vals))
		})
	})
}
