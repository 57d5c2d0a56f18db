package webhook

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/objects"
)

// ownedPath matches every place injection may write: one annotation (or the annotations object
// when the Pod has none), the Pod's volumes, and a container's env, volumeMounts or args.
var ownedPath = regexp.MustCompile(`^(/metadata/annotations(/[^/]+)?|/spec/volumes(/-)?|/spec/containers/[0-9]+/(env(/[0-9]+|/-)?|volumeMounts(/-)?|args(/-)?))$`)

// admitRaw sends raw, the bytes of a Pod exactly as an API server would, through the handler.
func admitRaw(t *testing.T, m *PodMutator, namespace string, raw []byte) Outcome {
	t.Helper()
	return m.Admit(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: namespace,
		Kind:   metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Object: runtime.RawExtension{Raw: raw},
	}})
}

// applyPatch applies the response's operations to raw the way the API server does, and checks
// that each addresses a place injection owns and only injection's own duplicates are removed.
func applyPatch(t *testing.T, raw []byte, resp admission.Response) []byte {
	t.Helper()
	for _, op := range resp.Patches {
		assert.Regexp(t, ownedPath, op.Path, "operation %s outside what injection writes", op.Json())
		if op.Operation == "remove" {
			assert.Regexp(t, `^/spec/containers/[0-9]+/env/[0-9]+$|^/metadata/annotations/`, op.Path, "only a dropped duplicate env entry may be removed")
		}
	}
	if len(resp.Patches) == 0 {
		assert.Nil(t, resp.PatchType, "no operations, no patch type")
		return raw
	}
	b, err := json.Marshal(resp.Patches)
	require.NoError(t, err)
	p, err := jsonpatch.DecodePatch(b)
	require.NoError(t, err)
	out, err := p.Apply(raw)
	require.NoError(t, err, "patch %s", b)
	return out
}

// canonical is a Pod's encoding, so two Pods compare equal when they carry the same values
// (quantities, nil or empty lists).
func canonical(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	b, err := json.Marshal(p)
	require.NoError(t, err)
	return string(b)
}

func decodeRaw(t *testing.T, raw []byte) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	require.NoError(t, kjson.UnmarshalCaseSensitivePreserveInts(raw, p))
	return p
}

// goldenLookup resolves from the cluster files of snapshots/inject, as `kvcache inject
// --cluster` does.
func goldenLookup(t *testing.T, r *generator.Renderer, files ...string) objects.Reader {
	t.Helper()
	var set objects.Set
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		objs, err := r.Decode(f, data)
		require.NoError(t, err)
		for _, o := range objs {
			switch x := o.(type) {
			case *kvv1.KVCacheBackend:
				set.Backends = append(set.Backends, *x)
			case *kvv1.KVCachePool:
				set.Pools = append(set.Pools, *x)
			case *kvv1.KVCachePoolBinding:
				set.Bindings = append(set.Bindings, *x)
			case *kvv1.Setting:
				set.Settings = append(set.Settings, *x)
			default:
				t.Fatalf("%s: %T is not a cluster object", f, o)
			}
		}
	}
	return objects.NewFiles(set, objects.FileOptions{SystemNamespace: generator.DefaultSystemNamespace, Defaults: r.Defaults()})
}

// goldenPods returns the Pods (and Pod templates, as Pods) of one input of snapshots/inject.
func goldenPods(t *testing.T, r *generator.Renderer, path string) []*corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	objs, err := r.Decode(path, data)
	require.NoError(t, err)
	var pods []*corev1.Pod
	for _, o := range objs {
		var p *corev1.Pod
		switch x := o.(type) {
		case *corev1.Pod:
			p = x.DeepCopy()
		case *appsv1.Deployment:
			p = &corev1.Pod{ObjectMeta: x.Spec.Template.ObjectMeta, Spec: x.Spec.Template.Spec}
		case *batchv1.Job:
			p = &corev1.Pod{ObjectMeta: x.Spec.Template.ObjectMeta, Spec: x.Spec.Template.Spec}
		case *batchv1.CronJob:
			p = &corev1.Pod{ObjectMeta: x.Spec.JobTemplate.Spec.Template.ObjectMeta, Spec: x.Spec.JobTemplate.Spec.Template.Spec}
		case *corev1.ConfigMap:
			continue
		default:
			t.Fatalf("%s: %T is not a kind this test reads; add it", path, o)
		}
		p.APIVersion, p.Kind = "v1", "Pod"
		if p.Namespace == "" {
			p.Namespace = o.GetNamespace()
		}
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		pods = append(pods, p)
	}
	return pods
}

// Every golden case goes through both paths: the handler's patch applied to the Pod's bytes, and
// injection's typed output. They must be the same Pod, a refusal the same message, and a Pod
// that injection returns unchanged (not opted in, resubmitted as written) must get no patch.
func TestPatchAppliedToTheRequestIsInjectionsOutputForEveryGolden(t *testing.T) {
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	inj := injection.New(r)
	dir := golden.Dir("inject")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".yaml") && !strings.Contains(strings.TrimSuffix(n, ".yaml"), ".") && n != "cluster.yaml" {
			names = append(names, strings.TrimSuffix(n, ".yaml"))
		}
	}
	sort.Strings(names)
	require.NotEmpty(t, names, "no cases in %s", dir)
	var injected, unchanged, refusedN int
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			files := []string{filepath.Join(dir, "cluster.yaml")}
			if _, err := os.Stat(filepath.Join(dir, name+".cluster.yaml")); err == nil {
				files = append(files, filepath.Join(dir, name+".cluster.yaml"))
			}
			lookup := goldenLookup(t, r, files...)
			m := NewPodMutator(inj, lookup)
			pods := goldenPods(t, r, filepath.Join(dir, name+".yaml"))
			require.NotEmpty(t, pods)
			for _, pod := range pods {
				raw, err := json.Marshal(pod)
				require.NoError(t, err)
				o := admitRaw(t, m, pod.Namespace, raw)
				res, err := inj.Inject(context.Background(), pod.DeepCopy(), pod.Namespace, lookup)
				var rf *injection.Refusal
				if err != nil {
					require.ErrorAs(t, err, &rf)
					assert.Equal(t, OutcomeRefused, o.Result)
					assert.Equal(t, rf.Message, o.Response.Result.Message)
					assert.Empty(t, o.Response.Patches)
					refusedN++
					continue
				}
				require.True(t, o.Response.Allowed, "admitted by injection, so by the handler: %+v", o.Response.Result)
				want, err := res.Apply(pod)
				require.NoError(t, err)
				got := decodeRaw(t, applyPatch(t, raw, o.Response))
				assert.JSONEq(t, canonical(t, want), canonical(t, got), "the patched request is injection's output")
				if canonical(t, want) == canonical(t, pod) {
					assert.Empty(t, o.Response.Patches, "a Pod injection returns unchanged gets no patch")
					unchanged++
				} else {
					injected++
				}
			}
		})
	}
	// The golden set covers all three outcomes; a rename that emptied one would hide it.
	assert.Positive(t, injected, "injected cases")
	assert.Positive(t, unchanged, "unchanged cases (not opted in, resubmitted)")
	assert.Positive(t, refusedN, "refused cases")
}

// rawCase is a Pod written as bytes, with fields no compiled Pod type knows at every level
// injection writes to or beside.
type rawCase struct {
	name string
	pod  string
	// kept are the unknown fields the patched document must still carry: a JSON pointer and the
	// value there.
	kept map[string]any
	// replaced are env entries injection writes over: pointer to the entry and its name.
	replaced map[string]string
}

var rawCases = []rawCase{{
	name: "vLLM beside a sidecar, with its own volume, mount and env",
	pod: `{
  "apiVersion": "v1", "kind": "Pod", "futureTop": {"a": 1},
  "metadata": {
    "name": "raw", "namespace": "team-a", "futureMeta": "m",
    "labels": {"kvcache.gpustack.ai/inject": "true"},
    "annotations": {"kvcache.gpustack.ai/binding": "team-a", "kvcache.gpustack.ai/engine": "vLLM",
      "kvcache.gpustack.ai/container": "server", "team/owner": "chat"}
  },
  "spec": {
    "futureField": {"enabled": true},
    "volumes": [{"name": "models", "emptyDir": {}, "futureVolume": "v"}],
    "containers": [
      {"name": "proxy", "image": "envoyproxy/envoy:v1.31", "args": ["-c", "/etc/envoy.yaml"], "futureContainer": 7,
       "env": [{"name": "MOONCAKE_MASTER", "value": "proxy's own", "futureEnv": "p"}]},
      {"name": "server", "image": "vllm/vllm-openai:v0.29.0", "futureContainer": "c",
       "command": ["vllm"], "args": ["serve", "--model", "Qwen/Qwen3-8B"],
       "env": [{"name": "HF_HOME", "value": "/models", "futureEnv": "e"},
               {"name": "MC_TE_METRIC", "value": "0", "futureEnv": "user's metric toggle"}],
       "volumeMounts": [{"name": "models", "mountPath": "/models", "futureMount": true}]}
    ]
  }
}`,
	kept: map[string]any{
		"/futureTop":                                           map[string]any{"a": float64(1)},
		"/metadata/futureMeta":                                 "m",
		"/metadata/annotations/team~1owner":                    "chat",
		"/spec/futureField":                                    map[string]any{"enabled": true},
		"/spec/volumes/0/futureVolume":                         "v",
		"/spec/containers/0/futureContainer":                   float64(7),
		"/spec/containers/0/env/0/futureEnv":                   "p",
		"/spec/containers/1/futureContainer":                   "c",
		"/spec/containers/1/env/0/futureEnv":                   "e",
		"/spec/containers/1/env/1/futureEnv":                   "user's metric toggle",
		"/spec/containers/1/volumeMounts/0/futureMount":        true,
		"/spec/containers/1/env/1/value":                       "0",
		"/spec/containers/0/env/0/value":                       "proxy's own",
		"/spec/containers/1/volumeMounts/0/mountPath":          "/models",
		"/spec/containers/0/args/1":                            "/etc/envoy.yaml",
		"/metadata/annotations/kvcache.gpustack.ai~1container": "server",
	},
}, {
	name: "SGLang overruling a declared tenant and dropping its duplicate",
	pod: `{
  "apiVersion": "v1", "kind": "Pod", "futureTop": true,
  "metadata": {"name": "raw", "namespace": "team-a", "futureMeta": {"x": "y"},
    "labels": {"kvcache.gpustack.ai/inject": "true"},
    "annotations": {"kvcache.gpustack.ai/binding": "team-a", "kvcache.gpustack.ai/engine": "SGLang"}},
  "spec": {"futureField": [1, 2],
    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "futureEmptyDir": 1}}],
    "containers": [{"name": "server", "image": "lmsysorg/sglang:v0.5.18", "futureContainer": {},
      "command": ["python3", "-m", "sglang.launch_server"], "args": ["--model-path", "Qwen/Qwen3-8B"],
      "env": [{"name": "MOONCAKE_TENANT_ID", "value": "someone-else", "futureEnv": "overwritten"},
              {"name": "HF_HOME", "value": "/models", "futureEnv": "kept"},
              {"name": "MOONCAKE_TENANT_ID", "value": "duplicate", "futureEnv": "dropped"},
              {"name": "PYTHONUNBUFFERED", "value": "1", "futureEnv": "kept too"}],
      "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm", "futureMount": "m"}]}]}
}`,
	kept: map[string]any{
		"/futureTop":                                         true,
		"/metadata/futureMeta":                               map[string]any{"x": "y"},
		"/spec/futureField":                                  []any{float64(1), float64(2)},
		"/spec/volumes/0/emptyDir/futureEmptyDir":            float64(1),
		"/spec/containers/0/futureContainer":                 map[string]any{},
		"/spec/containers/0/env/1/futureEnv":                 "kept",
		"/spec/containers/0/env/2/futureEnv":                 "kept too",
		"/spec/containers/0/volumeMounts/0/futureMount":      "m",
		"/spec/containers/0/env/1/name":                      "HF_HOME",
		"/spec/containers/0/env/2/name":                      "PYTHONUNBUFFERED",
		"/spec/containers/0/args/0":                          "--model-path",
		"/metadata/annotations/kvcache.gpustack.ai~1engine":  "SGLang",
		"/metadata/labels/kvcache.gpustack.ai~1inject":       "true",
		"/spec/containers/0/volumeMounts/0/mountPath":        "/dev/shm",
		"/spec/containers/0/image":                           "lmsysorg/sglang:v0.5.18",
		"/spec/containers/0/command/2":                       "sglang.launch_server",
		"/spec/volumes/0/emptyDir/medium":                    "Memory",
		"/metadata/annotations/kvcache.gpustack.ai~1binding": "team-a",
		"/spec/containers/0/env/1/value":                     "/models",
		"/spec/containers/0/env/2/value":                     "1",
		"/metadata/name":                                     "raw",
	},
	replaced: map[string]string{"/spec/containers/0/env/0": "MOONCAKE_TENANT_ID"},
}, {
	name: "vLLM with no args, env, volumes or mounts of its own",
	pod: `{"apiVersion": "v1", "kind": "Pod", "futureTop": "t",
  "metadata": {"name": "raw", "namespace": "team-a", "futureMeta": 0,
    "labels": {"kvcache.gpustack.ai/inject": "true"},
    "annotations": {"kvcache.gpustack.ai/binding": "team-a", "kvcache.gpustack.ai/engine": "vLLM"}},
  "spec": {"futureField": "f", "containers": [{"name": "server", "image": "vllm/vllm-openai:v0.29.0",
    "command": ["vllm", "serve", "Qwen/Qwen3-8B"], "futureContainer": null}]}}`,
	kept: map[string]any{
		"/futureTop":                         "t",
		"/metadata/futureMeta":               float64(0),
		"/spec/futureField":                  "f",
		"/spec/containers/0/futureContainer": nil,
		"/spec/containers/0/command/2":       "Qwen/Qwen3-8B",
		"/spec/containers/0/args/0":          "--kv-transfer-config",
		"/spec/volumes/0/name":               "gpustack-kvcache-config",
	},
}}

// pointer reads the value at a JSON pointer of a decoded document.
func pointer(doc any, ptr string) (any, bool) {
	cur := doc
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil {
				return nil, false
			}
			if i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// A Pod's bytes may carry fields this build's Pod type does not know (a newer API server). The
// patch keeps every one of them, at every level injection writes to or beside, except inside an
// env entry injection writes over whole; and it still makes the Pod injection's output.
func TestPatchKeepsFieldsThePodTypeDoesNotKnow(t *testing.T) {
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	inj := injection.New(r)
	lookup := walkthroughLookup(r)
	m := NewPodMutator(inj, lookup)
	for _, c := range rawCases {
		t.Run(c.name, func(t *testing.T) {
			raw := []byte(c.pod)
			require.True(t, json.Valid(raw))
			o := admitRaw(t, m, "team-a", raw)
			require.Equal(t, OutcomeAdmitted, o.Result, "%+v", o.Response.Result)
			patched := applyPatch(t, raw, o.Response)
			var doc any
			require.NoError(t, json.Unmarshal(patched, &doc))
			for ptr, want := range c.kept {
				got, ok := pointer(doc, ptr)
				if assert.True(t, ok, "%s is gone from the patched Pod", ptr) {
					assert.Equal(t, want, got, ptr)
				}
			}
			for ptr, name := range c.replaced {
				entry, ok := pointer(doc, ptr)
				require.True(t, ok, ptr)
				assert.Equal(t, name, entry.(map[string]any)["name"], ptr)
				assert.NotContains(t, entry, "futureEnv", "%s is injection's entry, written whole", ptr)
			}
			res, err := inj.Inject(context.Background(), decodeRaw(t, raw), "team-a", lookup)
			require.NoError(t, err)
			want, err := res.Apply(decodeRaw(t, raw))
			require.NoError(t, err)
			assert.JSONEq(t, canonical(t, want), canonical(t, decodeRaw(t, patched)), "the patched Pod, read by this build, is injection's output")
		})
	}
}
