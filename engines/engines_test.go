package engines

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/vocab"
)

func TestCheckLaunchEnvJudgesWhatEnvDoesToTheEngine(t *testing.T) {
	for _, c := range []struct {
		name    string
		engine  Engine
		launch  Launch
		classes []string
	}{
		{"no env launcher", VLLM, Launch{Program: "vllm"}, nil},
		{"an unrelated assignment", SGLang, Launch{Env: []EnvChange{{Name: "HF_HOME", Token: "HF_HOME=/m"}}}, nil},
		{"an unrelated unset", VLLM, Launch{Env: []EnvChange{{Name: "HOME", Token: "-u HOME", Unset: true}}}, nil},
		{"the source key assigned on vLLM", VLLM, Launch{Env: []EnvChange{{Name: vocab.ConfigPathEnv, Token: vocab.ConfigPathEnv + "=/x"}}}, []string{ClassConfigSource}},
		{"SGLang's source key assigned on SGLang", SGLang, Launch{Env: []EnvChange{{Name: "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", Token: "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH="}}}, []string{ClassConfigSource}},
		{"SGLang's source key on vLLM means nothing there", VLLM, Launch{Env: []EnvChange{{Name: "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", Token: "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH=/x"}}}, nil},
		{"an injected variable assigned", SGLang, Launch{Env: []EnvChange{{Name: vocab.MasterEnv, Token: vocab.MasterEnv + "=x:1"}}}, []string{ClassOwnedKey}},
		{"an injected variable unset", SGLang, Launch{Env: []EnvChange{{Name: vocab.TenantEnv, Token: "-u " + vocab.TenantEnv, Unset: true}}}, []string{ClassOwnedKey}},
		{"the config path unset on vLLM-Ascend", VLLMAscend, Launch{Env: []EnvChange{{Name: vocab.ConfigPathEnv, Token: "--unset=" + vocab.ConfigPathEnv, Unset: true}}}, []string{ClassOwnedKey}},
		{"an observability toggle assigned is the user's to choose", VLLM, Launch{Env: []EnvChange{{Name: vocab.MetricEnv, Token: vocab.MetricEnv + "=0"}}}, nil},
		{"an emptied environment, then an assignment", SGLang, Launch{ClearsEnv: "-i", Env: []EnvChange{{Name: vocab.ProtocolEnv, Token: vocab.ProtocolEnv + "=rdma"}}}, []string{ClassOwnedKey, ClassOwnedKey}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, f := range c.engine.CheckLaunchEnv(c.launch) {
				got = append(got, f.Class)
				assert.Contains(t, f.Message, "the container's launch line")
				assert.Regexp(t, `; remove`, f.Message, "states the fix")
			}
			assert.Equal(t, c.classes, got)
		})
	}
}

func TestCheckLaunchEnvMessages(t *testing.T) {
	fs := SGLang.CheckLaunchEnv(Launch{Env: []EnvChange{{Name: vocab.TenantEnv, Token: "-u " + vocab.TenantEnv, Unset: true}}})
	if assert.Len(t, fs, 1) {
		assert.Equal(t, `the container's launch line unsets MOONCAKE_TENANT_ID ("-u MOONCAKE_TENANT_ID" through env), so the value injection writes would never reach SGLang; remove it`, fs[0].Message)
	}
}

func TestManagedTailFollowsTheContainersOwnArguments(t *testing.T) {
	hier := []string{"--enable-hierarchical-cache"}
	retraction := []string{"--disaggregation-decode-retraction-backup", "cpu_tensor"}
	for _, c := range []struct {
		name   string
		engine Engine
		argv   []string
		want   []string
	}{
		{"a plain SGLang server gets the host tier", SGLang, []string{"--model-path", "m"}, hier},
		{"a prefill half gets the host tier", SGLang, []string{"--disaggregation-mode", "prefill"}, hier},
		{"null is a plain server", SGLang, []string{"--disaggregation-mode=null"}, hier},
		{"a decode half gets the retraction backup instead", SGLang, []string{"--disaggregation-mode", "decode"}, retraction},
		{"a decode half by --f=v and a unique prefix", SGLang, []string{"--disaggregation-m=decode"}, retraction},
		{"the last mode given is the one SGLang keeps", SGLang, []string{"--disaggregation-mode", "decode", "--disaggregation-mode", "prefill"}, hier},
		{"naming the host tier drops the operator's", SGLang, []string{"--enable-hierarchical-cache"}, nil},
		{"naming it by SGLang 0.5.23's alias drops it too", SGLang, []string{"--enable-hicache"}, nil},
		{"a decode half naming the alias gets nothing either", SGLang, []string{"--disaggregation-mode", "decode", "--enable-hic"}, nil},
		{"naming the retraction backup drops the operator's", SGLang, []string{"--disaggregation-mode", "decode", "--disaggregation-decode-retraction-backup=host_pool"}, nil},
		{"after a bare -- nothing is a flag", SGLang, []string{"--", "--disaggregation-mode", "decode"}, hier},
		{"vLLM gets no tail", VLLM, []string{"serve", "m"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.engine.ManagedTail(c.argv))
		})
	}
}

func TestDisaggregationModeNamesTheArgumentHoldingTheValue(t *testing.T) {
	for _, c := range []struct {
		argv []string
		mode string
		at   int
	}{
		{[]string{"--model-path", "m"}, "", -1},
		{[]string{"--disaggregation-mode", "decode"}, "decode", 1},
		{[]string{"x", "--disaggregation-mode=prefill"}, "prefill", 1},
		{[]string{"--disaggregation-mode", "null"}, "", 1},
		{[]string{"--disaggregation-mode"}, "", -1},
	} {
		mode, at := SGLang.DisaggregationMode(c.argv)
		assert.Equal(t, c.mode, mode, "%q", c.argv)
		assert.Equal(t, c.at, at, "%q", c.argv)
	}
	_, at := VLLM.DisaggregationMode([]string{"--disaggregation-mode", "decode"})
	assert.Equal(t, -1, at, "vLLM's halves differ by kv_role")
}

func TestFindRefusedFlagsFindsTheConfigFileFlagOnBothEngines(t *testing.T) {
	for _, e := range All() {
		fs := e.FindRefusedFlags(nil, []string{"--config", "f.yaml", "--config-format", "x"}, true)
		if assert.Len(t, fs, 1, e.Name) {
			assert.Equal(t, ClassConfigFile, fs[0].Class)
			assert.Equal(t, 0, fs[0].Index)
		}
	}
}

// What $(NAME) reads is the env Edits leaves, so the two must be one list.
func TestEnvOfIsTheEnvTheEditsLeave(t *testing.T) {
	f := &Fragment{
		Env:        []corev1.EnvVar{{Name: vocab.MasterEnv, Value: "m:1"}, {Name: vocab.TenantEnv, Value: "t"}},
		DefaultEnv: []corev1.EnvVar{{Name: vocab.MetricEnv, Value: "1"}, {Name: vocab.BandwidthMetricEnv, Value: "1"}},
	}
	for _, env := range [][]corev1.EnvVar{
		nil,
		{{Name: "A", Value: "1"}},
		{{Name: vocab.MasterEnv, Value: "x"}, {Name: "A"}, {Name: vocab.MasterEnv, Value: "y"}, {Name: vocab.MetricEnv, Value: "0"}},
		{{Name: vocab.TenantEnv, Value: "a"}, {Name: vocab.TenantEnv, Value: "b"}, {Name: vocab.TenantEnv, Value: "c"}},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Command: []string{"python3", "-m", "sglang.launch_server"}, Env: env}}}}
		out, err := SGLang.Edits(pod, 0, f, nil).ApplyToPod(pod)
		if assert.NoError(t, err) {
			assert.Equal(t, out.Spec.Containers[0].Env, f.EnvOf(&pod.Spec.Containers[0]), "%v", env)
		}
	}
}

// The tail is decided from the arguments as the kubelet hands them over: a decode half selected
// through $(NAME) gets the retraction backup.
func TestEditsDecideTheTailFromTheExpandedArguments(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Command: []string{"python3", "-m", "sglang.launch_server"}, Args: []string{"$(MODE)"},
		Env: []corev1.EnvVar{{Name: "MODE", Value: "--disaggregation-mode=decode"}},
	}}}}
	out, err := SGLang.Edits(pod, 0, &Fragment{Args: []string{"--hicache-storage-backend", "mooncake"}}, nil).ApplyToPod(pod)
	if assert.NoError(t, err) {
		assert.Equal(t, []string{"$(MODE)", "--hicache-storage-backend", "mooncake", "--disaggregation-decode-retraction-backup", "cpu_tensor"}, out.Spec.Containers[0].Args)
	}
}

func TestServingPortIsWhatTheParserReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Engine
		argv []string
		want int32
		ok   bool
	}{
		{"vLLM without --port listens on 8000", VLLM, []string{"vllm", "serve", "m"}, 8000, true},
		{"SGLang without --port listens on 30000", SGLang, []string{"python3", "-m", "sglang.launch_server", "--model-path", "m"}, 30000, true},
		{"--port N", VLLM, []string{"vllm", "serve", "m", "--port", "8080"}, 8080, true},
		{"--port=N", SGLang, []string{"python3", "-m", "sglang.launch_server", "--port=31000"}, 31000, true},
		{"the last --port wins, as argparse reads it", VLLM, []string{"vllm", "serve", "m", "--port", "8001", "--port=8002"}, 8002, true},
		{"an unexpanded variable is no port", VLLM, []string{"vllm", "serve", "m", "--port", "$(PORT)"}, 0, false},
		{"--port without a value is no port", VLLM, []string{"vllm", "serve", "m", "--port"}, 0, false},
		{"after -- everything is positional", VLLM, []string{"vllm", "serve", "m", "--", "--port", "9"}, 8000, true},
		{"a longer flag is not --port", VLLM, []string{"vllm", "serve", "m", "--port-offset", "9"}, 8000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.e.ServingPort(tc.argv)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}
