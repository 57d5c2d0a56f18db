package engines

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

type flagMatchCase struct {
	token string
	flag  string
	want  bool
	why   string
}

func runFlagMatchCases(t *testing.T, p Parser, cases []flagMatchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s~%s", c.token, c.flag), func(t *testing.T) {
			assert.Equal(t, c.want, p.Matches(c.token, c.flag), c.why)
		})
	}
}

func TestParserMatchesVLLMStyle(t *testing.T) {
	p := Parser{VLLMStyle: true, Known: VLLMKnownFlags}
	const transfer, dtype, offload = "--kv-transfer-config", "--kv-cache-dtype", "--kv-offloading-size"
	runFlagMatchCases(t, p, []flagMatchCase{
		// --f, --f=v (the value of --f v is the next token, see TestParserFind).
		{"--kv-transfer-config", transfer, true, "exact"},
		{`--kv-transfer-config={"kv_connector":"X","kv_role":"kv_both"}`, transfer, true, "--f=v"},
		{"--kv-transfer-config=", transfer, true, "--f= with an empty value"},
		{`--kv-transfer-config={"a.b": "c=d"}`, transfer, true, "dots and '=' in the value are the value's"},
		// Unique prefixes.
		{"--kv-transfer-conf", transfer, true, "unique prefix"},
		{`--kv-transfer-conf={"kv_role":"kv_both"}`, transfer, true, "unique prefix with a value"},
		{"--kv-t", transfer, true, "shortest unique prefix"},
		// Ambiguous and too short.
		{"--kv-", transfer, false, "ambiguous: every --kv-* flag"},
		{"--kv", transfer, false, "too short (2 characters after --)"},
		{"--k", transfer, false, "too short"},
		// Underscores before the first '.'.
		{"--kv_transfer_config", transfer, true, "underscore form"},
		{`--kv_transfer_config={"kv_role":"kv_both"}`, transfer, true, "underscore form with a value"},
		{"--kv-transfer_config", transfer, true, "mixed"},
		{"--kv_transfer-config=x", transfer, true, "mixed, other way round"},
		{"--kv_transfer_conf", transfer, true, "underscores and a unique prefix"},
		{"--kv_", transfer, false, "underscored ambiguous prefix"},
		// Dotted members address a field of the JSON-valued flag: it is that flag.
		{"--kv-transfer-config.kv_role=kv_both", transfer, true, "dotted member with a value"},
		{"--kv-transfer-config.kv_role", transfer, true, "dotted member, value in the next token"},
		{"--kv_transfer_config.kv_connector=X", transfer, true, "underscored flag, dotted member"},
		{"--kv-transfer_config.kv_role=kv_both", transfer, true, "mixed flag, dotted member"},
		{"--kv-transfer-config.kv_connector_extra_config.a_b=1", transfer, true, "nested member"},
		{"--kv-transfer-config.kv_role+", transfer, true, "list-append member"},
		{"--kv-transfer-config.", transfer, true, "empty member"},
		{"--kv-transfer-conf.kv_role=kv_both", transfer, true, "unique prefix with a member"},
		{"--kv-transfer.config=x", transfer, true, `"--kv-transfer" {"config": "x"}: a unique prefix with member "config"`},
		// The part from the first '.' on is a member and is never normalised into the name.
		{"--kv.transfer_config=x", transfer, false, `underscore after the dot untouched: the name is "--kv"`},
		{"--kv-transfer.config_x", transfer, true, "member underscores stay in the (dropped) member"},
		// Longer or different flags.
		{"--kv-transfer-configs", transfer, false, "a longer name is not a prefix"},
		{"--kv-transfer-config-extra", transfer, false, "a longer name is not a prefix"},
		{"--kv-events-config", transfer, false, "another flag"},
		{"--kv-transfer-config", "--kv-events-config", false, "another flag"},
		// Not long options.
		{"-kv-transfer-config", transfer, false, "single dash"},
		{"-k", transfer, false, "short option"},
		{"kv-transfer-config", transfer, false, "positional"},
		{"--", transfer, false, "terminator"},
		{"", transfer, false, "empty"},
		{"--=x", transfer, false, "no name"},
		{"--.kv_role=x", transfer, false, "member without a flag"},

		// --kv-cache-dtype is a prefix of --kv-cache-dtype-skip-layers: exact wins, prefixes clash.
		{"--kv-cache-dtype", dtype, true, "exact"},
		{"--kv-cache-dtype=fp8", dtype, true, "--f=v"},
		{"--kv_cache_dtype=fp8", dtype, true, "underscore form"},
		{"--kv-cache_dtype", dtype, true, "mixed"},
		{"--kv-cache-dtyp", dtype, false, "ambiguous with --kv-cache-dtype-skip-layers"},
		{"--kv-cache-d", dtype, false, "ambiguous"},
		{"--kv-cache", dtype, false, "ambiguous with every --kv-cache-*"},
		{"--kv-cache-memory-bytes", dtype, false, "a longer different flag"},
		{"--kv-cache-memory-bytes=8G", dtype, false, "a longer different flag with a value"},
		{"--kv_cache_memory_bytes", dtype, false, "a longer different flag, underscored"},
		{"--kv-cache-dtypes", dtype, false, "unknown longer flag"},
		{"--kv-cache-dtypes", "--kv-cache-memory-bytes", false, "unknown longer flag"},
		{"--kv-cache-dtype-skip-layers", dtype, false, "the longer flag"},
		{"--kv-cache-dtype-skip", dtype, false, "a prefix of the longer flag only"},
		{"--kv-cache-dtype-s", "--kv-cache-dtype-skip-layers", true, "unique prefix of the longer flag"},
		{"--kv-cache-dtype", "--kv-cache-dtype-skip-layers", false, "the exact shorter flag wins"},
		{"--kv-cache-mem", "--kv-cache-memory-bytes", true, "unique prefix"},
		{"--kv-cache-metrics", "--kv-cache-metrics-sample", false, "the exact shorter flag wins"},

		// --config names a file of options; --config-format is another flag, so only the exact
		// name reads as it.
		{"--config", "--config", true, "exact"},
		{"--config=serve.yaml", "--config", true, "--f=v"},
		{"--config.x=1", "--config", true, "a dotted member"},
		{"--confi", "--config", false, "ambiguous with --config-format"},
		{"--config-format", "--config", false, "another flag"},
		{"--config_format", "--config", false, "another flag, underscored"},

		// --kv-offloading-size (refused on the vLLM family).
		{"--kv-offloading-size=8", offload, true, "--f=v"},
		{"--kv_offloading_size", offload, true, "underscore form"},
		{"--kv-offloading-s", offload, true, "unique prefix"},
		{"--kv-offloading", offload, false, "ambiguous with --kv-offloading-backend"},
		{"--kv-off", offload, false, "ambiguous"},
		{"--kv-offloading-backend=native", offload, false, "another flag"},
	})
}

func TestParserMatchesSGLang(t *testing.T) {
	p := SGLang.Parser
	const backend, extra, hier, dtype, retraction = "--hicache-storage-backend", "--hicache-storage-backend-extra-config",
		"--enable-hierarchical-cache", "--kv-cache-dtype", "--disaggregation-decode-retraction-backup"
	runFlagMatchCases(t, p, []flagMatchCase{
		{"--hicache-storage-backend", backend, true, "exact"},
		{"--hicache-storage-backend=mooncake", backend, true, "--f=v"},
		{"--hicache-storage-backend-extra-config", backend, false, "the longer flag is not the shorter"},
		{`--hicache-storage-backend-extra-config={"a":1}`, backend, false, "the longer flag with a value"},
		{"--hicache-storage-backen", backend, false, "ambiguous with the extra-config flag"},
		{"--hicache-storage-b", backend, false, "ambiguous"},
		{"--hicache-storage", backend, false, "ambiguous with the prefetch flags too"},
		{"--hic", backend, false, "ambiguous with every --hicache-*"},
		{"--hi", backend, false, "too short"},
		{"--hicache_storage_backend", backend, false, "SGLang reads no underscore form"},
		{"--hicache_storage_backend=mooncake", backend, false, "SGLang reads no underscore form"},
		{"--hicache-storage_backend", backend, false, "SGLang reads no mixed form"},
		{"--hicache-storage-backend.name=x", backend, false, "SGLang reads no dotted member"},
		{"-hicache-storage-backend", backend, false, "single dash"},

		{"--hicache-storage-backend-extra-config", extra, true, "exact"},
		{`--hicache-storage-backend-extra-config={"master_server_address":"m:50051"}`, extra, true, "--f=v"},
		{"--hicache-storage-backend-extra-config=@/etc/x.toml", extra, true, "--f=@file"},
		{"--hicache-storage-backend-extra", extra, true, "unique prefix"},
		{"--hicache-storage-backend-e", extra, true, "unique prefix"},
		{"--hicache-storage-backend", extra, false, "exactly the shorter flag: exact match wins"},
		{"--hicache-storage-backend=mooncake", extra, false, "the shorter flag with a value"},
		{"--hicache_storage_backend_extra_config", extra, false, "no underscore form"},

		{"--enable-hierarchical-cache", hier, true, "exact"},
		{"--enable-hierarchical", hier, true, "unique prefix"},
		{"--enable-hier", hier, true, "unique prefix"},
		{"--enable-hi", hier, false, "ambiguous with --enable-hisparse"},
		{"--enable-h", hier, false, "ambiguous"},
		{"--enable-", hier, false, "ambiguous with every --enable-*"},
		{"--ena", hier, false, "ambiguous"},
		{"--enable_hierarchical_cache", hier, false, "no underscore form"},
		{"--enable-hierarchical-cache-ssd", hier, false, "a longer name is not a prefix"},

		{"--kv-cache-dtype", dtype, true, "exact"},
		{"--kv-cache-dtype=fp8_e5m2", dtype, true, "--f=v"},
		{"--kv-cache-d", dtype, true, "unique prefix on SGLang"},
		{"--kv-", dtype, false, "ambiguous with --kv-events-config"},
		{"--kv_cache_dtype", dtype, false, "no underscore form"},

		{"--enable-hicache", hier, true, "SGLang 0.5.23's alias"},
		{"--enable-hic", hier, true, "a unique prefix of the alias"},
		{"--enable-hicach", hier, true, "a unique prefix of the alias"},
		{"--enable-hi", hier, false, "ambiguous with --enable-hisparse, though the flag and its alias agree"},
		{"--enable-hicache-x", hier, false, "a longer name is not the alias"},
		{"--enable-hicache", "--hicache-ratio", false, "the alias is only its flag"},

		{"--config", "--config", true, "exact"},
		{"--config=/etc/sglang.yaml", "--config", true, "--f=v"},
		{"--conf", "--config", true, "a unique prefix on SGLang, which has no --config-format"},
		{"--con", "--config", false, "ambiguous with --constrained-json-* and --context-length"},
		{"--config-x", "--config", false, "a longer name"},

		{"--disaggregation-decode-retraction-backup=cpu_tensor", retraction, true, "--f=v"},
		{"--disaggregation-decode-r", retraction, true, "unique prefix"},
		{"--disaggregation-decode-", retraction, false, "ambiguous"},
		{"--disa", retraction, false, "ambiguous with --disable-*"},
	})
}

func TestParserMatchesFlagOutsideKnown(t *testing.T) {
	// A flag not listed in Known still matches exactly and by prefix; only listed flags compete.
	p := Parser{Known: []string{"--alpha-beta"}}
	assert.True(t, p.Matches("--alpha-gamma", "--alpha-gamma"))
	assert.True(t, p.Matches("--alpha-g", "--alpha-gamma"))
	assert.False(t, p.Matches("--alpha-", "--alpha-gamma"), "a prefix of --alpha-beta too")
	assert.False(t, p.Matches("--alpha-beta", "--alpha-gamma"))
	empty := Parser{}
	assert.True(t, empty.Matches("--kv-t", "--kv-transfer-config"))
	assert.False(t, empty.Matches("--kv", "--kv-transfer-config"), "too short whatever Known says")
}

func TestParserFind(t *testing.T) {
	vllm := Parser{VLLMStyle: true, Known: VLLMKnownFlags}
	sglang := Parser{Known: SGLangKnownFlags}
	cases := []struct {
		name   string
		parser Parser
		argv   []string
		flag   string
		want   []int
	}{
		{"--f v: the flag token, not its value", vllm,
			[]string{"serve", "m", "--kv-transfer-config", `{"kv_role":"kv_both"}`}, "--kv-transfer-config", []int{2}},
		{"every spelling", vllm,
			[]string{"serve", "--kv-transfer-config={}", "--kv_transfer_config", "{}", "--kv-transfer-conf={}", "--kv-transfer-config.kv_role", "kv_both", "--kv-transfer_config.kv_connector=X"},
			"--kv-transfer-config", []int{1, 2, 4, 5, 7}},
		{"a longer different flag is not found", vllm,
			[]string{"serve", "--kv-cache-memory-bytes", "8G", "--kv-cache-dtype-skip-layers", "0"}, "--kv-cache-dtype", nil},
		{"scanning stops at --", vllm,
			[]string{"serve", "--kv-cache-dtype", "fp8", "--", "--kv-cache-dtype", "--kv-transfer-config"}, "--kv-cache-dtype", []int{1}},
		{"after --, a value that looks like the flag is positional", vllm,
			[]string{"serve", "--", "--kv-transfer-config"}, "--kv-transfer-config", nil},
		{"-- first", vllm, []string{"--", "--kv-transfer-config"}, "--kv-transfer-config", nil},
		{"short options never match", vllm,
			[]string{"-k", "x", "-kv-transfer-config", "-tp", "2"}, "--kv-transfer-config", nil},
		{"argparse reads a --flag token as an option even where a value was due", vllm,
			[]string{"--served-model-name", "--kv-transfer-config"}, "--kv-transfer-config", []int{1}},
		{"a value mentioning the flag is not the flag", vllm,
			[]string{"--served-model-name", "kv-transfer-config", "--model=--kv-transfer-config"}, "--kv-transfer-config", nil},
		{"nil argv", vllm, nil, "--kv-transfer-config", nil},
		{"SGLang: exact and --f=v", sglang,
			[]string{"--model-path", "m", "--hicache-storage-backend", "file", "--hicache-storage-backend=mooncake"}, "--hicache-storage-backend", []int{2, 4}},
		{"SGLang: the extra-config flag is not the backend flag", sglang,
			[]string{"--hicache-storage-backend-extra-config", "{}"}, "--hicache-storage-backend", nil},
		{"SGLang: the backend flag is not the extra-config flag", sglang,
			[]string{"--hicache-storage-backend", "mooncake"}, "--hicache-storage-backend-extra-config", nil},
		{"SGLang: underscore forms are not read", sglang,
			[]string{"--hicache_storage_backend", "mooncake", "--enable_hierarchical_cache"}, "--hicache-storage-backend", nil},
		{"SGLang: a unique prefix names the hierarchical cache", sglang,
			[]string{"--model-path", "m", "--enable-hierarchical"}, "--enable-hierarchical-cache", []int{2}},
		{"SGLang: stops at --", sglang,
			[]string{"--", "--enable-hierarchical-cache"}, "--enable-hierarchical-cache", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.parser.Find(c.argv, c.flag))
		})
	}
}

func TestKnownFlagLists(t *testing.T) {
	for name, c := range map[string]struct {
		list     []string
		required []string
	}{
		"vLLM": {VLLMKnownFlags, []string{
			"--kv-transfer-config", "--kv-cache-dtype", "--kv-cache-memory-bytes", "--kv-events-config",
			"--kv-offloading-size", "--kv-offloading-backend", "--kv-sharing-fast-prefill",
			"--kv-cache-metrics", "--kv-cache-metrics-sample", "--config", "--config-format",
		}},
		"SGLang": {SGLangKnownFlags, []string{
			"--hicache-storage-backend", "--hicache-storage-backend-extra-config", "--hicache-storage-prefetch-policy",
			"--hicache-ratio", "--hicache-size", "--hicache-write-policy", "--hicache-io-backend", "--hicache-mem-layout",
			"--kv-cache-dtype", "--enable-hierarchical-cache", "--disaggregation-decode-retraction-backup", "--disaggregation-mode",
			"--config", "--enable-hicache",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			for _, f := range c.required {
				assert.Contains(t, c.list, f)
			}
			assert.True(t, slices.IsSorted(c.list), "kept sorted")
			assert.Len(t, slices.Compact(slices.Clone(c.list)), len(c.list), "no duplicates")
			for _, f := range c.list {
				assert.True(t, strings.HasPrefix(f, "--") && !strings.ContainsAny(f, "_.= "), "%q is a dash-form long flag", f)
			}
		})
	}
	assert.NotContains(t, SGLangKnownFlags, "--enable-hierarchical-cache-ssd", "not an SGLang flag")
	for alias, flag := range SGLangAliases {
		assert.Contains(t, SGLangKnownFlags, alias, "an alias competes for abbreviations like any flag")
		assert.Contains(t, SGLangKnownFlags, flag)
	}
}
