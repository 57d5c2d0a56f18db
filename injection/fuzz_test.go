package injection

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// fuzzCluster is a small cluster: a tcp store with a ledger, an Ascend store, a store without
// multi-tenancy, and a mixed-protocol store, each with a pool and a Binding in team-a.
func fuzzCluster(t testing.TB, r *generator.Renderer) *objects.Files {
	t.Helper()
	backend := func(name string, protocol kvv1.TransportProtocol, multiTenancy bool, groups ...kvv1.TransportProtocol) kvv1.KVCacheBackend {
		b := kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: name}}
		b.Spec.Transport.Protocol = protocol
		m := &kvv1.ManagedConnection{Leader: kvv1.Leader{MultiTenancy: &multiTenancy}}
		for _, g := range groups {
			mg := kvv1.MemberGroup{NodeSelector: map[string]string{"a": "b"}, CapacityPerMember: resource.MustParse("1Gi")}
			if g != "" {
				mg.Transport = &kvv1.Transport{Protocol: g}
			}
			m.Members = append(m.Members, mg)
		}
		b.Spec.Connection.Managed = m
		b.Default()
		return b
	}
	backends := []kvv1.KVCacheBackend{
		backend("dram", kvv1.ProtocolAuto, true, ""),
		backend("cann", kvv1.ProtocolCANN, true, ""),
		backend("legacy", kvv1.ProtocolTCP, false, ""),
		backend("mixed", kvv1.ProtocolRDMA, true, "", kvv1.ProtocolCANN),
	}
	var pools []kvv1.KVCachePool
	var bindings []kvv1.KVCachePoolBinding
	for _, b := range backends {
		pools = append(pools, kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: b.Name}, Spec: kvv1.KVCachePoolSpec{
			Backends: []string{b.Name}, Quota: kvv1.PoolQuota{Total: resource.MustParse("8Gi")},
		}})
		bindings = append(bindings, kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: b.Name}, Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: b.Name}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
			Domain: kvv1.Domain{Name: "team-a-" + b.Name, BlockSize: 64, Dtype: "bfloat16"},
		}})
	}
	return objects.NewFiles(objects.Set{Backends: backends, Pools: pools, Bindings: bindings}, objects.FileOptions{Defaults: r.Defaults()})
}

// fields splits a fuzzed string into argv-like tokens; "|" separates, so tokens may hold spaces.
func fields(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "|")
}

// fuzzPod builds a Pod from fuzzed strings. env entries are NAME=VALUE (a literal), NAME< (from a
// ConfigMap), NAME@ (the Pod's IP), or *PREFIX (an envFrom ConfigMap with that prefix); mounts
// are PATH or PATH:SUBPATH of a volume "data".
func fuzzPod(annotations, command, args, env, mounts string, labelled bool) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a", Annotations: map[string]string{}}}
	if labelled {
		pod.Labels = map[string]string{vocab.LabelInject: "true"}
	}
	for _, kv := range fields(annotations) {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.Contains(k, "/") {
			k = vocab.Prefix + k
		}
		pod.Annotations[k] = v
	}
	c := corev1.Container{Name: "server", Image: "engine", Command: fields(command), Args: fields(args)}
	for _, kv := range fields(env) {
		switch k, v, literal := strings.Cut(kv, "="); {
		case literal:
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
		case strings.HasPrefix(kv, "*"):
			c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: kv[1:], ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}}})
		case strings.HasSuffix(kv, "<"):
			c.Env = append(c.Env, corev1.EnvVar{Name: strings.TrimSuffix(kv, "<"), ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "engine"}, Key: "k"}}})
		case strings.HasSuffix(kv, "@"):
			c.Env = append(c.Env, corev1.EnvVar{Name: strings.TrimSuffix(kv, "@"), ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
		default:
			c.Env = append(c.Env, corev1.EnvVar{Name: kv})
		}
	}
	for _, m := range fields(mounts) {
		p, sub, _ := strings.Cut(m, ":")
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: p, SubPath: sub})
	}
	if len(c.VolumeMounts) > 0 {
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	pod.Spec.Containers = []corev1.Container{c}
	return pod
}

// FuzzInject checks the invariants of Inject on random annotations, commands, args, env and
// mounts: no panic; a refused Pod is unchanged; an admitted Pod carries a parseable record, one
// entry per injected variable, the user's args as a prefix of its args; its launch line as the
// kubelet hands it to the engine ($(NAME) expanded from the env as admitted) names no flag the
// engine owns or refuses, and no mount of the user's covers the projected file; and injecting it
// again gives it back unchanged (what kvcache inject prints may be applied as is).
func FuzzInject(f *testing.F) {
	seeds := [][6]string{
		{"binding=dram|engine=vLLM", "vllm", "serve|--model|m", "", "", "1"},
		{"binding=dram|engine=vLLM|role=Decode", "vllm", "serve|--kv_transfer_config={}", "", "", "1"},
		{"binding=dram|engine=SGLang", "python3|-m|sglang.launch_server", "--model-path|m|--enable-hierarchical", "MOONCAKE_TENANT_ID=x|MOONCAKE_TENANT_ID=y", "", "1"},
		{"binding=cann|engine=vLLM-Ascend", "tini|--|vllm", "serve", "MC_TE_METRIC=0", "", "1"},
		{"binding=legacy|engine=SGLang|launch-args-forwarded=true", "/start.sh", "", "", "", "1"},
		{"binding=mixed|engine=vLLM", "bash|-lc", "vllm serve", "", "", "1"},
		{"binding=dram|engine=vLLM|domain=x", "env|-S|vllm serve", "--kv-cache-dtype|fp8", "MOONCAKE_CONFIG_PATH=/x", "", "1"},
		{"binding=dram|engine=vLLM", "timeout|30|vllm", "serve|--|--kv-cache-dtype", "", "", "0"},
		{"binding=dram|engine=vLLM", "vllm", "serve|$(EXTRA)", "EXTRA=--kv-offloading-size=8", "", "1"},
		{"binding=dram|engine=vLLM", "vllm", "serve|--model=$(M)|$(IP)|x$(CM)", "M<|IP@|CM<", "", "1"},
		{"binding=dram|engine=SGLang", "python3|-m|sglang.launch_server", "$(HI)|--kv-$(D)", "*CM_|HI=--enable-hicache|D=cache-dtype", "", "1"},
		{"binding=dram|engine=SGLang", "python3|-m|sglang.launch_server", "--disaggregation-mode|$(MODE)", "MODE=decode", "", "1"},
		{"binding=dram|engine=vLLM", "$(BIN)", "serve", "BIN=vllm|A=$(BIN)", "", "1"},
		{"binding=dram|engine=vLLM", "vllm", "serve", "", "/etc/gpustack/kvcache/mooncake.json:mooncake.json", "1"},
		{"binding=cann|engine=vLLM-Ascend", "vllm", "serve", "", "/etc/gpustack/kvcache/x|/etc/gpustack", "1"},
		{"binding=dram|engine=vLLM|config-file-reviewed=true", "vllm", "serve|--config|f.yaml", "", "/etc/gpustack//kvcache/", "1"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5] == "1")
	}
	r, err := generator.NewRenderer()
	if err != nil {
		f.Fatal(err)
	}
	lookup := fuzzCluster(f, r)
	inj := New(r)
	f.Fuzz(func(t *testing.T, annotations, command, args, env, mounts string, labelled bool) {
		for _, s := range []string{annotations, command, args, env, mounts} {
			if !utf8.ValidString(s) {
				return // a Pod reaches admission as JSON, whose strings are UTF-8
			}
		}
		pod := fuzzPod(annotations, command, args, env, mounts, labelled)
		before := pod.DeepCopy()
		res, err := inj.Inject(context.Background(), pod, "team-a", lookup)
		if !equality.Semantic.DeepEqual(before, pod) {
			t.Fatalf("Inject modified its input")
		}
		var rf *Refusal
		if err != nil {
			if !errors.As(err, &rf) {
				t.Fatalf("non-refusal error: %v", err)
			}
			if rf.Message == "" || rf.Reason == "" {
				t.Fatalf("refusal without message or reason: %#v", rf)
			}
			return
		}
		if !res.Injected {
			if labelled || len(res.Patch) > 0 {
				t.Fatalf("an opted-in Pod was neither injected nor refused")
			}
			return
		}
		out, err := res.Apply(pod)
		if err != nil {
			t.Fatalf("the patch does not apply to its own Pod: %v", err)
		}
		var rec Record
		if err := json.Unmarshal([]byte(out.Annotations[vocab.AnnotationInjected]), &rec); err != nil {
			t.Fatalf("record does not parse: %v", err)
		}
		if rec.Binding != pod.Annotations[vocab.AnnotationBinding] || rec.Engine == "" {
			t.Fatalf("record %+v does not describe the Pod", rec)
		}
		c := out.Spec.Containers[0]
		seen := map[string]int{}
		for _, e := range c.Env {
			seen[e.Name]++
		}
		for _, name := range []string{"MOONCAKE_CONFIG_PATH", "MOONCAKE_MASTER", "MOONCAKE_TENANT_ID", "MOONCAKE_PROTOCOL", "MC_TE_METRIC", "MC_STORE_CLIENT_METRIC_BANDWIDTH"} {
			if seen[name] > 1 {
				t.Fatalf("%s appears %d times", name, seen[name])
			}
		}
		userArgs := pod.Spec.Containers[0].Args
		if len(c.Args) < len(userArgs) || !slices.Equal(c.Args[:len(userArgs)], userArgs) {
			t.Fatalf("user args %q are not a prefix of %q", userArgs, c.Args)
		}
		if !slices.Equal(c.Command, pod.Spec.Containers[0].Command) {
			t.Fatalf("command changed")
		}
		e, _ := engines.ByID(rec.Engine)
		user := engines.Texts(engines.NewEnvironment(c.Env, c.EnvFrom).Expand(slices.Concat(c.Command, userArgs)))
		for _, found := range e.FindRefusedFlags(nil, user, true) {
			if found.Class != engines.ClassConfigFile || pod.Annotations[vocab.AnnotationConfigFileReviewed] != "true" {
				t.Fatalf("admitted, and the engine reads %s from %q as the kubelet hands the launch line over", found.Flag, found.Token)
			}
		}
		if e.VLLMFamily() {
			for _, m := range c.VolumeMounts {
				p := path.Clean(m.MountPath)
				if m.Name != vocab.ConfigVolume && (p == vocab.ConfigMountPath || strings.HasPrefix(p, vocab.ConfigMountPath+"/")) {
					t.Fatalf("admitted with mount %s at %s over the projected configuration", m.Name, m.MountPath)
				}
			}
		}
		res2, err := inj.Inject(context.Background(), out, "team-a", lookup)
		if err != nil {
			t.Fatalf("injecting an injected Pod again was refused: %v", err)
		}
		if !res2.Injected || len(res2.Patch) > 0 {
			t.Fatalf("injecting an injected Pod again changed it")
		}
		if res2.Record != res.Record {
			t.Fatalf("the second record %+v differs from the first %+v", res2.Record, res.Record)
		}
	})
}
