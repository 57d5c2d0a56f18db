package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/values"
)

// kvcache runs the CLI in-process and returns exit code, stdout and stderr.
func kvcache(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStoreSnapshots(t *testing.T) {
	for _, c := range golden.Cases(t, golden.Dir("store"), ".input.yaml", ".yaml") {
		t.Run(c.Name, func(t *testing.T) {
			code, out, errOut := kvcache(t, "", "render", "-f", c.Input)
			require.Equal(t, 0, code, "stderr: %s", errOut)
			golden.Assert(t, c.Golden, []byte(out))
		})
	}
}

func TestRenderWithoutInputRendersTheWalkthrough(t *testing.T) {
	code, builtIn, errOut := kvcache(t, "", "render")
	require.Equal(t, 0, code, errOut)
	code, fromStdin, errOut := kvcache(t, string(values.Walkthrough()), "render", "-f", "-")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, fromStdin, builtIn, "the built-in example must be the walkthrough file")
	assert.Contains(t, builtIn, "name: mooncake-dram-leader")
	assert.Contains(t, builtIn, "kind: DaemonSet")
}

// What kubectl get -o yaml prints for several objects is a List: render reads its items as it
// reads documents.
func TestRenderReadsAListsItemsAsDocuments(t *testing.T) {
	var items []json.RawMessage
	for _, d := range splitDocuments("walkthrough", values.Walkthrough()) {
		j, err := d.toJSON()
		require.NoError(t, err)
		items = append(items, j)
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	require.NoError(t, err)
	code, fromList, errOut := kvcache(t, string(list), "render", "-f", "-")
	require.Equal(t, 0, code, errOut)
	_, builtIn, _ := kvcache(t, "", "render")
	assert.Equal(t, builtIn, fromList)
}

func TestRenderIsByteStable(t *testing.T) {
	input := filepath.Join(golden.Dir("store"), "shared-ledger.input.yaml")
	_, first, _ := kvcache(t, "", "render", "-f", input)
	for range 20 {
		_, again, _ := kvcache(t, "", "render", "-f", input)
		require.Equal(t, first, again)
	}
}

func TestRenderJSONIsAList(t *testing.T) {
	code, out, errOut := kvcache(t, "", "render", "-o", "json")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "{\n    \"apiVersion\": \"v1\",\n    \"items\": ["), out[:80])
	assert.Contains(t, out, `"kind": "List"`)
}

func TestRenderSystemNamespace(t *testing.T) {
	code, out, errOut := kvcache(t, "", "render", "--system-namespace", "kv-store")
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "gpustack-system")
	assert.Contains(t, out, "value: mooncake-dram-leader.kv-store.svc:50051")
}

// The store's NetworkPolicy admits the manager from the namespace --operator-namespace names
// (the chart's by default) and the scraper --network-policy-metrics-from names, as the manager's
// flags of the same names make the operator apply it.
func TestRenderNetworkPolicyFlags(t *testing.T) {
	code, out, errOut := kvcache(t, "", "render")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "kind: NetworkPolicy")
	assert.Contains(t, out, "          kubernetes.io/metadata.name: kvcache-system\n", "the chart's namespace by default")
	assert.NotContains(t, out, "monitoring")

	code, out, errOut = kvcache(t, "", "render", "--operator-namespace", "ops",
		"--network-policy-metrics-from", `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`)
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "kvcache-system")
	assert.Contains(t, out, `  - from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: ops
      podSelector:
        matchLabels:
          app.kubernetes.io/name: kvcache-operator
    ports:
    - port: 9003
      protocol: TCP
  - from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: monitoring
    ports:
    - port: 9003
      protocol: TCP
`)

	code, out, errOut = kvcache(t, "", "render", "--network-policy-metrics-from", `[{}]`)
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, `invalid argument "[{}]" for "--network-policy-metrics-from" flag: peer 0: names nothing: set podSelector, namespaceSelector or ipBlock`)
}

// writeFile puts content in a temp file and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

const backendHead = `apiVersion: worker.gpustack.ai/v1
kind: KVCacheBackend
metadata:
  name: store
spec:
`

func TestRenderRefusesBadInput(t *testing.T) {
	cases := []struct {
		name     string
		input    string
		wantCode int
		wantErr  string
	}{
		{
			name:     "an empty file says it holds no objects",
			input:    "# nothing here\n",
			wantCode: exitUsage,
			wantErr:  "no objects: the file is empty",
		},
		{
			name:     "an unknown kind names what is accepted",
			input:    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
			wantCode: exitUsage,
			wantErr:  "document 1 (line 1): kind Deployment (apps/v1) is not an input here: give Setting, InstanceType, KVCacheBackend, KVCachePool, KVCachePoolBinding, ModelDeployment objects of worker.gpustack.ai/v1",
		},
		{
			name:     "a wrong apiVersion names the served one",
			input:    "apiVersion: worker.gpustack.ai/v2\nkind: KVCachePool\nmetadata:\n  name: x\n",
			wantCode: exitUsage,
			wantErr:  "apiVersion worker.gpustack.ai/v2 is not served: use worker.gpustack.ai/v1",
		},
		{
			name:     "a YAML syntax error gives the line in the file",
			input:    "# first\n---\napiVersion: worker.gpustack.ai/v1\nkind: KVCachePool\nmetadata:\n  name: x\n   bad: indent\n",
			wantCode: exitUsage,
			wantErr:  "line 7",
		},
		{
			name:     "an unknown field is named with its path",
			input:    backendHead + "  connection:\n    managed:\n      members:\n        - nodeSelector: {a: b}\n          capacityPerMembr: 8Gi\n",
			wantCode: exitUsage,
			wantErr:  `unknown field "spec.connection.managed.members[0].capacityPerMembr"`,
		},
		{
			name:     "a quantity that does not parse is named with its path",
			input:    backendHead + "  connection:\n    managed:\n      members:\n        - nodeSelector: {a: b}\n          capacityPerMember: 8GB\n",
			wantCode: exitUsage,
			wantErr:  `spec.connection.managed.members[0].capacityPerMember: "8GB" is not a quantity: write a number with a suffix, e.g. 8Gi or 512Mi`,
		},
		{
			name:     "an invalid object exits 1 with the validation message",
			input:    backendHead + "  connection: {}\n",
			wantCode: exitInvalid,
			wantErr:  "invalid: KVCacheBackend/store: spec.connection: Required value: exactly one of spec.connection.managed (the operator runs the store) or spec.connection.external (an existing store) must be set",
		},
		{
			name:     "a fraction of a byte is refused, naming the field and the fix",
			input:    backendHead + "  connection:\n    managed:\n      leader: {}\n      members:\n        - nodeSelector: {a: b}\n          capacityPerMember: 100m\n",
			wantCode: exitInvalid,
			wantErr:  `invalid: KVCacheBackend/store: spec.connection.managed.members[0].capacityPerMember: Invalid value: "100m": is not a whole number of bytes (the suffix m is a thousandth: 100m is a tenth of a byte); write whole bytes, with a binary suffix, e.g. 8Gi`,
		},
		{
			name:     "a List's items are read one by one, and a bad item is named by its index",
			input:    "apiVersion: v1\nkind: List\nitems:\n- apiVersion: worker.gpustack.ai/v1\n  kind: KVCachePool\n  metadata: {name: p}\n  spec: {backends: [b], quota: {total: 1Gi}}\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: x}\n",
			wantCode: exitUsage,
			wantErr:  "in.yaml: document 1 (line 1), items[1]: kind Deployment (apps/v1) is not an input here",
		},
		{
			name:     "the same object twice is refused",
			input:    "apiVersion: worker.gpustack.ai/v1\nkind: KVCachePool\nmetadata: {name: p}\nspec: {backends: [b], quota: {total: 1Gi}}\n---\napiVersion: worker.gpustack.ai/v1\nkind: KVCachePool\nmetadata: {name: p}\nspec: {backends: [b], quota: {total: 1Gi}}\n",
			wantCode: exitInvalid,
			wantErr:  "KVCachePool p is also defined at",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := kvcache(t, "", "render", "-f", writeFile(t, "in.yaml", c.input))
			assert.Equal(t, c.wantCode, code)
			assert.Empty(t, out, "nothing may be printed on stdout when rendering fails")
			assert.Contains(t, errOut, c.wantErr)
		})
	}
}

func TestRenderUsageErrors(t *testing.T) {
	code, out, errOut := kvcache(t, "", "render", "-f", "/does/not/exist.yaml")
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "cannot read /does/not/exist.yaml")

	code, _, errOut = kvcache(t, "", "render", "-o", "table")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `--output "table": use yaml or json`)

	code, _, _ = kvcache(t, "", "render", "--no-such-flag")
	assert.Equal(t, exitUsage, code)
}

// An electing leader Pod copies the launcher out of the operator image: the chart's by default,
// the given one with --operator-image, as the manager's flag of the same name does.
func TestRenderOperatorImage(t *testing.T) {
	code, out, errOut := kvcache(t, "", "render")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "image: gpustack/kvcache-operator:0.1.0\n        name: kvcache-launcher")
	code, out, errOut = kvcache(t, "", "render", "--operator-image", "registry.example/kvcache:9")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "image: registry.example/kvcache:9\n        name: kvcache-launcher")
	assert.NotContains(t, out, "gpustack/kvcache-operator")
}

// render applies every admission rule the webhooks apply, not only the shape rules: what the
// webhook refuses, render refuses with the same message, and what it warns about, render warns
// about on stderr.
func TestRenderAppliesTheWebhooksCrossObjectRules(t *testing.T) {
	walkthrough := string(values.Walkthrough())
	for _, c := range []struct {
		name    string
		input   string
		refused []string
		warned  []string
	}{
		{
			name:    "a role naming an owned flag renders no second --kv-transfer-config",
			input:   strings.Replace(walkthrough, "      resources:\n        accelerator: 1", "      resources:\n        accelerator: 1\n      extraArgs: [\"--kv-transfer-config\", \"{}\"]", 1),
			refused: []string{`invalid: ModelDeployment/team-a/qwen-chat: spec.roles[0].extraArgs: Forbidden: --kv-transfer-config in args is owned by injection: the Binding writes it, and a second value would be an ambiguity nothing reports; remove it`},
		},
		{
			name: "a second Binding claiming the default domain on the same master is refused; the first holds it",
			input: walkthrough + `---
apiVersion: worker.gpustack.ai/v1
kind: KVCachePoolBinding
metadata: {name: team-b, namespace: team-b}
spec:
  poolRef: {name: shared-dram}
  quota: {ceiling: 4Gi}
  domain: {blockSize: 64, dtype: bfloat16}
`,
			refused: []string{`invalid: KVCachePoolBinding/team-b/team-b: spec.domain.name: Duplicate value: "default": already registered on the master of KVCacheBackend mooncake-dram by KVCachePoolBinding team-a/team-a; name a different domain`},
		},
		{
			name:   "a pool over a backend without a ledger renders with the webhook's warning",
			input:  strings.Replace(walkthrough, "      leader: {}", "      leader: {multiTenancy: false}", 1),
			warned: []string{"warning: KVCachePool/shared-dram: KVCacheBackend mooncake-dram keeps no tenant ledger (leader.multiTenancy: false): Binding ceilings on this pool are not enforced and every write lands in the store's default tenant"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := kvcache(t, c.input, "render", "-f", "-")
			if len(c.refused) > 0 {
				assert.Equal(t, exitInvalid, code)
				assert.Empty(t, out, "nothing is printed unless everything rendered")
				assert.Equal(t, strings.Join(c.refused, "\n")+"\n", errOut)
				return
			}
			require.Equal(t, 0, code, errOut)
			assert.Equal(t, strings.Join(c.warned, "\n")+"\n", errOut)
			assert.Contains(t, out, "kind: DaemonSet")
		})
	}
}

// render -n puts the Bindings and ModelDeployments that name no namespace there, as kubectl
// apply -n would: the walkthrough without its namespaces, rendered with -n team-a, is the
// walkthrough; without -n they are in default.
func TestRenderTakesTheNamespaceOfUnnamespacedObjectsFromTheFlag(t *testing.T) {
	code, want, errOut := kvcache(t, "", "render")
	require.Equal(t, 0, code, errOut)
	input := strings.ReplaceAll(string(values.Walkthrough()), "  namespace: team-a\n", "")
	require.NotContains(t, input, "namespace: team-a")
	code, out, errOut := kvcache(t, input, "render", "-f", "-", "-n", "team-a")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, want, out)
	code, out, errOut = kvcache(t, input, "render", "-f", "-")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "\n  namespace: default\n")
	assert.NotContains(t, out, "namespace: team-a")
}
