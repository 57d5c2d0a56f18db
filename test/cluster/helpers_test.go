package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// cli runs a command-line tool against the cluster as a user would (KUBECONFIG set) and returns
// its combined output.
func cli(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.kubeconfig)
	cmd.Dir = env.repo
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := cli(ctx, nil, env.helm, args...)
	require.NoError(t, err, "helm %s:\n%s", strings.Join(args, " "), out)
	return out
}

func kubectl(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := cli(ctx, stdin, env.kubectl, args...)
	require.NoError(t, err, "kubectl %s:\n%s", strings.Join(args, " "), out)
	return out
}

// walkthrough renders the walkthrough adapted to this machine (test/cluster/walkthrough), the
// manifests `make playground` applies.
func walkthrough(t *testing.T) []byte {
	t.Helper()
	return []byte(kubectl(t, nil, "kustomize", "--load-restrictor=LoadRestrictionsNone", filepath.Join("test", "cluster", "walkthrough")))
}

// eventually polls cond every interval until it holds, fails the test (with what cond last
// said) at the deadline, and returns when it held.
func eventually(t *testing.T, timeout, interval time.Duration, what string, cond func() (bool, string)) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return time.Now()
		}
		last = msg
		if time.Now().After(deadline) {
			require.FailNowf(t, "timed out", "after %s: %s; last seen: %s", timeout, what, last)
		}
		time.Sleep(interval)
	}
}

// adminOf is the master's admin API through its leader Service: the ClusterIP, which kube-proxy
// on this host routes to the serving leader, exactly as it does for Pods. Every call opens a
// new connection, as a new client does: the master's admin server answers 404 for as long as
// a connection lives that it accepted while it was starting.
func adminOf(t *testing.T, backend string) *store.Client {
	t.Helper()
	c, err := storeAdmin(context.Background(), backend)
	require.NoError(t, err)
	return c
}

func getBackend(t *testing.T, name string) *kvv1.KVCacheBackend {
	t.Helper()
	b := &kvv1.KVCacheBackend{}
	require.NoError(t, env.kube.Get(context.Background(), client.ObjectKey{Name: name}, b))
	return b
}

func condition(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func condTrue(conds []metav1.Condition, t string) bool {
	c := condition(conds, t)
	return c != nil && c.Status == metav1.ConditionTrue
}

// backendReady reports whether a backend is Ready with want bytes of capacity, its members
// mounted and its leader serving, and says what it reads otherwise.
func backendReady(b *kvv1.KVCacheBackend, want int64) (bool, string) {
	st := b.Status
	got := int64(-1)
	if st.Capacity != nil {
		got = st.Capacity.Total.Value()
	}
	ok := st.Phase == kvv1.PhaseReady && got == want && condTrue(st.Conditions, kvv1.ConditionMembersMounted) &&
		condTrue(st.Conditions, kvv1.ConditionLeaderAvailable)
	return ok, fmt.Sprintf("phase %s (%s), capacity %d (want %d)", st.Phase, st.PhaseMessage, got, want)
}

// labelledPod is a stand-in vLLM engine Pod that opts in to injection with the Binding.
func labelledPod(name, binding string, period string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a",
			Labels:      map[string]string{"kvcache.gpustack.ai/inject": "true"},
			Annotations: map[string]string{"kvcache.gpustack.ai/binding": binding, "kvcache.gpustack.ai/engine": "vLLM"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "server", Image: env.images["engine"], ImagePullPolicy: corev1.PullNever,
			Command: []string{"vllm"}, Args: []string{"serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000"},
			Env:            []corev1.EnvVar{{Name: "KVCACHE_STANDIN_PERIOD", Value: period}},
			ReadinessProbe: healthProbe(8000),
		}}},
	}
}

// sglangLabelledPod is the SGLang stand-in, opted in the same way.
func sglangLabelledPod(name, binding string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a",
			Labels:      map[string]string{"kvcache.gpustack.ai/inject": "true"},
			Annotations: map[string]string{"kvcache.gpustack.ai/binding": binding, "kvcache.gpustack.ai/engine": "SGLang"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "server", Image: env.images["engine"], ImagePullPolicy: corev1.PullNever,
			Command:        []string{"python3", "-m", "sglang.launch_server"},
			Args:           []string{"--model-path", "Qwen/Qwen2.5-7B-Instruct", "--host", "0.0.0.0", "--port", "30000"},
			Env:            []corev1.EnvVar{{Name: "KVCACHE_STANDIN_PERIOD", Value: "1"}},
			ReadinessProbe: healthProbe(30000),
		}}},
	}
}

// createPod creates p through the API (admission included) and returns what was stored.
func createPod(ctx context.Context, p *corev1.Pod, dryRun bool) (*corev1.Pod, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return env.client.CoreV1().Pods(p.Namespace).Create(ctx, p, opts)
}

func deletePod(ctx context.Context, ns, name string, grace int64) error {
	err := env.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func waitPodReadyIn(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, timeout, 250*time.Millisecond, "pod "+ns+"/"+name+" Ready", func() (bool, string) {
		var err error
		p, err = env.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			require.FailNowf(t, "pod ended", "%s", describePod(context.Background(), p))
		}
		return podCondition(p, corev1.PodReady), describePod(context.Background(), p)
	})
	return p
}

// logLine is one JSON line a stand-in engine printed, with the time the runtime received it.
type logLine struct {
	at   time.Time
	data map[string]any
}

func (l logLine) ok() bool { return l.data["ok"] == true }

// engineLines reads a stand-in's JSON lines (with the container runtime's timestamps) since t.
func engineLines(ctx context.Context, ns, pod, container string, since time.Time) ([]logLine, error) {
	st := metav1.NewTime(since.Add(-time.Second))
	raw, err := env.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true, SinceTime: &st}).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var out []logLine
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ts, rest, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(rest, "{") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		var data map[string]any
		if json.Unmarshal([]byte(rest), &data) != nil {
			continue
		}
		if !at.Before(since) {
			out = append(out, logLine{at: at, data: data})
		}
	}
	return out, nil
}

// firstJSONLine is the first JSON line of a stand-in's log.
func firstJSONLine(t *testing.T, ns, pod, container string) map[string]any {
	t.Helper()
	lines, err := engineLines(context.Background(), ns, pod, container, time.Time{})
	require.NoError(t, err)
	require.NotEmpty(t, lines, "no JSON line in the log of %s/%s", ns, pod)
	return lines[0].data
}

// stats are min/median/max of a series of measurements.
type stats []time.Duration

func (s stats) String() string {
	if len(s) == 0 {
		return "no runs"
	}
	d := slices.Clone(s)
	slices.Sort(d)
	r := func(x time.Duration) string { return x.Round(10 * time.Millisecond).String() }
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = r(x)
	}
	return fmt.Sprintf("min %s / median %s / max %s (%d runs: %s)", r(d[0]), r(s.median()), r(d[len(d)-1]), len(d), strings.Join(parts, ", "))
}

// median of the series (the upper one of an even count).
func (s stats) best() time.Duration {
	return slices.Min(s)
}

func (s stats) median() time.Duration {
	d := slices.Clone(s)
	slices.Sort(d)
	return d[len(d)/2]
}

// figures are the measurements of one suite run, printed together at its end.
var figures []string

func record(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	figures = append(figures, line)
	t.Log(line)
}

// clusterMemory is the resident memory of every process hack/cluster.sh started and of all
// their descendants (the containers' processes included), summed, in MiB.
func clusterMemory(t *testing.T) (float64, int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(env.state, "run", "*.pid"))
	require.NoError(t, err)
	roots := map[int]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if fields := strings.Fields(string(b)); len(fields) > 0 {
			if pid, err := strconv.Atoi(fields[0]); err == nil {
				roots[pid] = true
			}
		}
	}
	require.NotEmpty(t, roots, "no process recorded under %s/run", env.state)
	children := map[int][]int{}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[i+1:])
		pid, _ := strconv.Atoi(strings.Fields(s)[0])
		if len(fields) > 1 {
			ppid, _ := strconv.Atoi(fields[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	seen := map[int]bool{}
	var walk func(int)
	walk = func(p int) {
		if seen[p] {
			return
		}
		seen[p] = true
		for _, c := range children[p] {
			walk(c)
		}
	}
	for r := range roots {
		walk(r)
	}
	// containerd's shims are reparented to init; they run under the node's containerd state.
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		if bytes.Contains(cmdline, []byte("containerd-shim")) && bytes.Contains(cmdline, []byte(env.state)) {
			walk(pid)
		}
	}
	var kb int64
	for p := range seen {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				kb += n
			}
		}
	}
	return float64(kb) / 1024, len(seen)
}

// objectsOwnedByBackends lists every object in the system namespace that a KVCacheBackend owns.
func objectsOwnedByBackends(t *testing.T) []string {
	t.Helper()
	var out []string
	ctx := context.Background()
	ns := "gpustack-system"
	add := func(kind string, items []metav1.Object) {
		for _, o := range items {
			for _, ref := range o.GetOwnerReferences() {
				if ref.Kind == "KVCacheBackend" {
					out = append(out, kind+"/"+o.GetName())
				}
			}
		}
	}
	cs := env.client
	if l, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("Deployment", metaOf(l.Items))
	}
	if l, err := cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("DaemonSet", metaOf(l.Items))
	}
	if l, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("Service", metaOf(l.Items))
	}
	if l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("ConfigMap", metaOf(l.Items))
	}
	if l, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("ServiceAccount", metaOf(l.Items))
	}
	if l, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("Role", metaOf(l.Items))
	}
	if l, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("RoleBinding", metaOf(l.Items))
	}
	if l, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{}); err == nil {
		add("Lease", metaOf(l.Items))
	}
	sort.Strings(out)
	return out
}

func metaOf[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// leadersSteady says whether a store's leader Pods are steady: replicas of them, each one's
// master running (none going), exactly one ready (the serving master), the backend Ready with
// full capacity, and the engine's latest round good (when one is named). It returns the ready
// Pod, or nil and what is not steady yet.
func leadersSteady(ctx context.Context, t *testing.T, backend string, replicas int, full int64, engine string) (*corev1.Pod, string) {
	t.Helper()
	l, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{
		LabelSelector: vocab.LabelInstance + "=" + backend + "," + vocab.LabelComponent + "=leader"})
	if err != nil {
		return nil, err.Error()
	}
	var ready []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return nil, "leader Pod " + p.Name + " not running"
		}
		if podCondition(&p, corev1.PodReady) {
			ready = append(ready, p)
		}
	}
	if len(l.Items) != replicas || len(ready) != 1 {
		return nil, fmt.Sprintf("%d leader Pods, %d ready", len(l.Items), len(ready))
	}
	if ok, msg := backendReady(getBackend(t, backend), full); !ok {
		return nil, msg
	}
	if engine != "" {
		lines, err := engineLines(ctx, bindingNS, engine, "server", time.Now().Add(-2*time.Second))
		if err != nil || len(lines) == 0 || !lines[len(lines)-1].ok() {
			return nil, fmt.Sprintf("the latest round of %s not good (%v)", engine, err)
		}
	}
	return &ready[0], ""
}

// diagnoseBackend collects what says why a store operation did not go as expected: the
// backend's events since t0 and the managers' log lines since t0 that contain one of words
// (lower case).
func diagnoseBackend(ctx context.Context, name string, t0 time.Time, words ...string) string {
	var b strings.Builder
	if l, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}); err == nil {
		for _, e := range l.Items {
			if e.LastTimestamp.After(t0) || e.EventTime.After(t0) || e.CreationTimestamp.After(t0) {
				fmt.Fprintf(&b, "event %s %s: %s\n", e.Type, e.Reason, e.Message)
			}
		}
	}
	st := metav1.NewTime(t0)
	if l, err := env.client.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kvcache-operator"}); err == nil {
		for _, p := range l.Items {
			raw, _ := env.client.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(ctx)
			for _, line := range strings.Split(string(raw), "\n") {
				low := strings.ToLower(line)
				if !slices.ContainsFunc(words, func(w string) bool { return strings.Contains(low, w) }) {
					continue
				}
				if len(line) > 400 {
					line = line[:400]
				}
				fmt.Fprintf(&b, "%s: %s\n", p.Name, line)
			}
		}
	}
	return b.String()
}

// nothingLeft says whether no Pod matching selector is left in the store's or the engines'
// namespace and no object is owned by a backend.
func nothingLeft(ctx context.Context, t *testing.T, selector string) (bool, string) {
	t.Helper()
	for _, ns := range []string{systemNS, bindingNS} {
		l, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		if len(l.Items) > 0 {
			return false, fmt.Sprintf("%d Pods in %s (%s...)", len(l.Items), ns, l.Items[0].Name)
		}
	}
	if owned := objectsOwnedByBackends(t); len(owned) > 0 {
		return false, "owned by a backend: " + strings.Join(owned, ", ")
	}
	return true, ""
}
