package engines

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
