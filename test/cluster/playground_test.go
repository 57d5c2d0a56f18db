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

const playgroundEngine = "playground-engine" // test/cluster/walkthrough/engine-pod.yaml

// TestPlayground runs `make playground`'s steps (hack/playground.sh up) twice in a row on the
// suite's cluster, as a newcomer does: the first installs the chart, applies the walkthrough and
// creates the engine Pod; the second upgrades the release, re-applies the walkthrough and
// replaces the engine Pod (a bare Pod cannot be updated in place). Each run must end with the
// engine Pod injected, Ready, and its first round a put and a get through the store. It removes
// what it made, so TestWalkthrough starts from nothing.
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

	var uids []types.UID
	for run := 1; run <= 2; run++ {
		t0 := time.Now()
		out, err := script("hack/playground.sh", "up")
		require.NoError(t, err, "run %d of hack/playground.sh up (make playground):\n%s", run, out)
		record(t, "make playground's steps (hack/playground.sh up), run %d: %s", run, time.Since(t0).Round(100*time.Millisecond))
		assert.Contains(t, out, "The playground runs.", "run %d", run)
		if run > 1 {
			assert.Contains(t, out, `Release "kvcache" has been upgraded`, "run %d upgrades the release", run)
			assert.Contains(t, out, "replacing the engine Pod", "run %d replaces the engine Pod", run)
		}

		p, err := env.client.CoreV1().Pods(bindingNS).Get(ctx, playgroundEngine, metav1.GetOptions{})
		require.NoError(t, err)
		require.Nil(t, p.DeletionTimestamp, "run %d: the engine Pod is not going", run)
		require.True(t, podCondition(p, corev1.PodReady), "run %d: the engine Pod Ready:\n%s", run, describePod(ctx, p))
		rec, ok := injection.RecordOf(p)
		require.True(t, ok, "run %d: the engine Pod carries the injection record: %v", run, p.Annotations)
		assert.Equal(t, bindingName, rec.Binding)
		assert.Equal(t, "vllm", rec.Engine)
		line := firstJSONLine(t, bindingNS, playgroundEngine, "server")
		assert.Equal(t, true, line["ok"], "run %d: %v", run, line)
		assert.Equal(t, true, line["get_equal"], "run %d read back what it put", run)
		assert.Equal(t, "default", line["tenant"], "run %d writes under the Binding's tenant", run)
		assert.Contains(t, out, `"round": 1,`, "run %d prints the engine's first round", run)
		uids = append(uids, p.UID)
	}
	assert.NotEqual(t, uids[0], uids[1], "the second run replaced the engine Pod")
	assert.Contains(t, helm(t, "status", release, "-n", releaseNS), "REVISION: 2", "the second run upgraded the release")
}

// removePlayground deletes what the playground made, while the operator still runs to release
// the walkthrough's objects: the engine Pod, the walkthrough, the release, and the namespaces
// that were not there before, waiting until they are gone.
func removePlayground(t *testing.T, existed map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := cli(ctx, nil, env.kubectl, "delete", "-f", "test/cluster/walkthrough/engine-pod.yaml", "--ignore-not-found", "--wait=true"); err != nil {
		t.Errorf("cleanup: kubectl delete the engine Pod: %v\n%s", err, out)
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
