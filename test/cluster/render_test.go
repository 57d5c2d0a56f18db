package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/operator"
)

// renderEqualsApplied saves the live objects of this API as a user would (kubectl get -o json),
// renders them with the real `kvcache render` (the manager's --operator-image and system
// namespace, read from its Deployment), and requires every printed object, the store of the
// backend (its ledger seed holding the pool's Binding) and the ModelDeployment's roles, to be
// exactly what the operator applied, field by field (testenv.RenderMatchesApplied).
func (w *walk) renderEqualsApplied(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var docs []string
	for _, args := range [][]string{
		{"get", "kvcachebackends,kvcachepools,settings,instancetypes", "-o", "json"},
		{"get", "kvcachepoolbindings,modeldeployments", "-A", "-o", "json"},
	} {
		out, err := kubectlOut(ctx, nil, args...)
		require.NoError(t, err)
		var list struct {
			Items []map[string]any `json:"items"`
		}
		require.NoError(t, json.Unmarshal(out, &list))
		for _, it := range list.Items {
			b, err := sigsyaml.Marshal(it)
			require.NoError(t, err)
			docs = append(docs, string(b))
		}
	}
	dir := t.TempDir()
	live := filepath.Join(dir, "live.yaml")
	require.NoError(t, os.WriteFile(live, []byte(strings.Join(docs, "---\n")), 0o600))
	bin, err := testenv.BuildKvcache(ctx, dir)
	require.NoError(t, err)
	image := managerFlag(t, "--operator-image")
	cmd := exec.CommandContext(ctx, bin, "render", "-f", live, "--system-namespace", systemNS, "--operator-image", image)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	printed, err := cmd.Output()
	require.NoError(t, err, "kvcache render: %s", stderr.String())

	compared, diffs, err := testenv.RenderMatchesApplied(func(stdin []byte, args ...string) ([]byte, error) {
		return kubectlOut(ctx, stdin, args...)
	}, operator.FieldManager, printed)
	require.NoError(t, err)
	record(t, "kvcache render of the live objects equals what the operator applied: %d objects (%s)", len(compared), strings.Join(compared, ", "))
	assert.Empty(t, diffs, "fields of what the operator applied that kvcache render prints otherwise")
	for _, want := range []string{
		"Deployment/" + systemNS + "/" + backendName + "-leader", "DaemonSet/" + systemNS + "/" + backendName + "-member-0",
		"ConfigMap/" + systemNS + "/" + backendName + "-tenant-quota-policy", "Deployment/" + bindingNS + "/" + mdName + "-server",
	} {
		assert.Contains(t, compared, want)
	}
}

// kubectlOut runs the real kubectl and returns its standard output alone.
func kubectlOut(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, env.kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.kubeconfig)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// managerFlag is the value of one flag of the manager's container, as the chart set it.
func managerFlag(t *testing.T, flag string) string {
	t.Helper()
	out, err := kubectlOut(context.Background(), nil, "-n", releaseNS, "get", "deployment", fullname, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	require.NoError(t, err)
	var args []string
	require.NoError(t, json.Unmarshal(out, &args))
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	require.FailNow(t, "the manager has no "+flag, "args %q", args)
	return ""
}
