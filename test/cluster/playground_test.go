package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvcache-operator/kvcache/injection"
)

// The playground's engines (test/cluster/walkthrough/vllm-engines.yaml): real vLLMs, one per node.
var playgroundEngines = []string{"vllm-a", "vllm-b"}

// TestPlayground runs `make playground`'s steps (hack/playground.sh up) twice in a row on the
// suite's cluster, as a newcomer does: the first installs the chart, applies the walkthrough and
// creates two real vLLM engines in team-a, one per node, injected by the webhook; the second
// upgrades the release, re-applies the walkthrough and keeps the engines, which are still what
// the file and injection make of them. Each run ends with a new prompt sent to the first engine
// and then to the second, which must load at least 90% of its tokens from the store (its own
// counters, printed), faster than a prompt of the same length it computes. It removes what it
// made, so TestWalkthrough starts from nothing.
func TestPlayground(t *testing.T) {
	ctx := context.Background()
	if out, err := cli(ctx, nil, env.helm, "status", release, "-n", releaseNS); err == nil {
		require.FailNow(t, "the release is already installed", "a %s release exists in %s (make playground?): `make playground-down` or `helm uninstall %s -n %s` first:\n%s", release, releaseNS, release, releaseNS, out)
	}
	existed := map[string]bool{}
	for _, ns := range []string{systemNS, bindingNS, releaseNS} {
		_, err := env.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		existed[ns] = err == nil
	}
	t.Cleanup(func() { removePlayground(t, existed) })

	uids := map[string]types.UID{}
	for run := 1; run <= 2; run++ {
		t0 := time.Now()
		out, err := script("hack/playground.sh", "up")
		require.NoError(t, err, "run %d of hack/playground.sh up (make playground):\n%s", run, out)
		record(t, "make playground's steps (hack/playground.sh up), run %d: %s", run, time.Since(t0).Round(100*time.Millisecond))
		assert.Contains(t, out, "The playground runs.", "run %d", run)
		if run > 1 {
			assert.Contains(t, out, `Release "kvcache" has been upgraded`, "run %d upgrades the release", run)
			for _, e := range playgroundEngines {
				assert.Contains(t, out, "keeping engine "+e+" (current)", "run %d keeps the engines (a real engine takes a minute to start)", run)
			}
		}
		for _, name := range playgroundEngines {
			p, err := env.client.CoreV1().Pods(bindingNS).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			require.Nil(t, p.DeletionTimestamp, "run %d: engine %s is not going", run, name)
			require.True(t, podCondition(p, corev1.PodReady), "run %d: engine %s Ready:\n%s", run, name, describePod(ctx, p))
			rec, ok := injection.RecordOf(p)
			require.True(t, ok, "run %d: engine %s carries the injection record: %v", run, name, p.Annotations)
			assert.Equal(t, bindingName, rec.Binding)
			assert.Equal(t, "vllm", rec.Engine)
			assert.Equal(t, "default", rec.Domain, "run %d: the walkthrough Binding's domain is the tenant", run)
			if run == 1 {
				uids[name] = p.UID
			} else {
				assert.Equal(t, uids[name], p.UID, "run %d kept engine %s", run, name)
			}
		}
		second := playgroundFigures(t, out, "vllm-b (node-1), the same prompt:")
		alone := playgroundFigures(t, out, "vllm-b (node-1), a new prompt of the same length:")
		first := playgroundFigures(t, out, "vllm-a (node-0), a prompt the store has not seen:")
		assert.Zero(t, first.store, "run %d: the first engine's prompt is new to the store", run)
		assert.Zero(t, alone.store, "run %d: a new prompt gets nothing from the store", run)
		assert.GreaterOrEqual(t, float64(second.store), 0.9*float64(second.prompt), "run %d: the second engine loaded at least 90%% of the prompt from the store:\n%s", run, out)
		record(t, "make playground run %d: the second engine took %d of %d prompt tokens from the store, first token after %s (the same length without the store: %s; the first engine, computing: %s)",
			run, second.store, second.prompt, second.ttft, alone.ttft, first.ttft)
	}
	mib, procs := clusterMemory(t)
	record(t, "make playground with both engines serving: %.0f MiB resident in %d processes of the cluster (engines included)", mib, procs)
	assert.Contains(t, helm(t, "status", release, "-n", releaseNS), "REVISION: 2", "the second run upgraded the release")
}

// promptLine is one line of hack/prompt's output.
type promptLine struct {
	prompt, store int
	ttft          string
}

// playgroundFigures reads the line of hack/prompt's output that starts with prefix:
// "<prefix> N prompt tokens, M from the store (P%), first token after D".
func playgroundFigures(t *testing.T, out, prefix string) promptLine {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		var l promptLine
		var share string
		_, err := fmt.Sscanf(strings.TrimSpace(rest), "%d prompt tokens, %d from the store %s first token after %s", &l.prompt, &l.store, &share, &l.ttft)
		require.NoError(t, err, "hack/prompt's line %q", line)
		return l
	}
	require.FailNow(t, "no line of hack/prompt", "no line starting %q in:\n%s", prefix, out)
	return promptLine{}
}

// removePlayground deletes what the playground made, while the operator still runs to release
// the walkthrough's objects: the engine Pod, the walkthrough, the release, and the namespaces
// that were not there before, waiting until they are gone.
func removePlayground(t *testing.T, existed map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, name := range playgroundEngines {
		if out, err := cli(ctx, nil, env.kubectl, "-n", bindingNS, "delete", "pod", name, "--ignore-not-found", "--wait=true", "--grace-period=5"); err != nil {
			t.Errorf("cleanup: kubectl delete the engine %s: %v\n%s", name, err, out)
		}
	}
	if out, err := cli(ctx, walkthrough(t), env.kubectl, "delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=3m"); err != nil {
		t.Errorf("cleanup: kubectl delete -f the walkthrough: %v\n%s", err, out)
	}
	if _, err := cli(ctx, nil, env.helm, "status", release, "-n", releaseNS); err == nil {
		if out, err := cli(ctx, nil, env.helm, "uninstall", release, "-n", releaseNS, "--wait"); err != nil {
			t.Errorf("cleanup: helm uninstall: %v\n%s", err, out)
		}
	}
	var gone []string
	for ns, was := range existed {
		if was {
			continue
		}
		if err := env.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete namespace %s: %v", ns, err)
		}
		gone = append(gone, ns)
	}
	// TestWalkthrough creates them again: a namespace still terminating would refuse its objects.
	// (On a loaded machine the namespace controller took over 2 minutes once, with nothing left
	// in them.)
	nsCtx, nsCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer nsCancel()
	t0 := time.Now()
	defer func() {
		t.Logf("cleanup: the playground's namespaces went in %s", time.Since(t0).Round(100*time.Millisecond))
	}()
	if err := poll(nsCtx, 5*time.Minute, func() (bool, error) {
		for _, ns := range gone {
			if _, err := env.client.CoreV1().Namespaces().Get(nsCtx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("cleanup: namespaces %s not gone: %v\n%s", strings.Join(gone, ", "), err, whatHoldsNamespaces(gone))
	}
}

// whatHoldsNamespaces says why namespaces do not go: their conditions and the Pods left in them.
func whatHoldsNamespaces(names []string) string {
	ctx := context.Background()
	var b strings.Builder
	for _, name := range names {
		ns, err := env.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, c := range ns.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				fmt.Fprintf(&b, "namespace %s: %s: %s\n", name, c.Type, c.Message)
			}
		}
		pods, _ := env.client.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
		for i := range pods.Items {
			fmt.Fprintf(&b, "  %s\n", describePod(ctx, &pods.Items[i]))
		}
	}
	return b.String()
}
