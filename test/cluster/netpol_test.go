package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/vocab"
)

// TestNetworkPoliciesAreEnforced proves the cluster's enforcer before anything relies on it: a
// Pod selected by a policy that admits one namespace accepts connections from that namespace
// and from the host (the kubelet's probes keep it Ready), and none from another namespace,
// whether on the same node or the other, directly or through a Service; removing the policy
// opens it. The delays from a policy change to its effect are measured.
func TestNetworkPoliciesAreEnforced(t *testing.T) {
	ctx := context.Background()
	nodes := nodeNames(t)
	require.GreaterOrEqual(t, len(nodes), 2, "two nodes, to judge traffic across them")
	server := env.namespace
	allowed, denied := env.namespace+"-np-allowed", env.namespace+"-np-denied"
	for _, ns := range []string{allowed, denied} {
		_, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = env.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		waitServiceAccount(t, ns)
	}
	srv := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "np-server", Namespace: server, Labels: map[string]string{"app": "np-server"}},
		Spec: corev1.PodSpec{NodeName: nodes[1], Containers: []corev1.Container{{
			Name: "http", Image: env.images["store"], ImagePullPolicy: corev1.PullNever,
			Command:        []string{"python3", "-m", "http.server", "8080"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
		}}},
	}
	create(t, ctx, srv)
	create(t, ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "np-server", Namespace: server},
		Spec:       corev1.ServiceSpec{Selector: srv.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	})
	clients := map[string]string{} // "namespace/node" -> Pod name
	for _, ns := range []string{allowed, denied} {
		for i, node := range nodes[:2] {
			name := fmt.Sprintf("client-%d", i)
			_, err := env.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(0)), Containers: []corev1.Container{{
					Name: "c", Image: env.images["store"], ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
				}}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			clients[ns+"/"+node] = name
		}
	}
	for key, name := range clients {
		ns, _, _ := strings.Cut(key, "/")
		waitPodReadyIn(t, ns, name, 2*time.Minute)
	}
	waitPodReady(t, ctx, srv.Name)
	ip := podIP(t, ctx, srv.Name)
	svc := "np-server." + server + ".svc.cluster.local:80"
	direct := ip + ":8080"

	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "np-server", Namespace: server},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: srv.Labels},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
					Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{allowed}}}},
			}}}},
		},
	}
	t0 := time.Now()
	_, err := env.client.NetworkingV1().NetworkPolicies(server).Create(ctx, policy, metav1.CreateOptions{})
	require.NoError(t, err)
	closed := untilReach(t, denied, clients[denied+"/"+nodes[0]], direct, false, t0)

	for key, name := range clients {
		ns, _, _ := strings.Cut(key, "/")
		for _, addr := range []string{direct, svc} {
			err := connect(ctx, ns, name, addr)
			if ns == allowed {
				assert.NoError(t, err, "%s reaches %s under the policy", key, addr)
			} else {
				assert.Error(t, err, "%s is kept from %s by the policy", key, addr)
			}
		}
	}
	p, err := env.client.CoreV1().Pods(server).Get(ctx, srv.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, podCondition(p, corev1.PodReady), "the kubelet's probes pass the policy")

	t1 := time.Now()
	require.NoError(t, env.client.NetworkingV1().NetworkPolicies(server).Delete(ctx, policy.Name, metav1.DeleteOptions{}))
	opened := untilReach(t, denied, clients[denied+"/"+nodes[0]], direct, true, t1)
	record(t, "NetworkPolicy enforcement (hack/cluster/netpol): a new policy closed a denied namespace's connections after %s, its deletion opened them after %s",
		closed.Round(10*time.Millisecond), opened.Round(10*time.Millisecond))
}

// connect opens a TCP connection from a Pod (by exec, with a 2 s timeout) and closes it.
func connect(ctx context.Context, ns, pod, addr string) error {
	host, port, _ := strings.Cut(addr, ":")
	script := fmt.Sprintf("import socket; socket.create_connection((%q, %s), timeout=2).close()", host, port)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := kubectlOut(ctx, nil, "exec", "-n", ns, pod, "--", "python3", "-c", script)
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// untilReach waits until the Pod's connections to addr succeed (reach) or fail (!reach) and
// returns when, after since, the first attempt that saw it started (a refused attempt takes its
// whole timeout to say so).
func untilReach(t *testing.T, ns, pod, addr string, reach bool, since time.Time) time.Duration {
	t.Helper()
	var at time.Duration
	eventually(t, time.Minute, 100*time.Millisecond, fmt.Sprintf("%s/%s reaching %s: %v", ns, pod, addr, reach), func() (bool, string) {
		start := time.Now()
		err := connect(context.Background(), ns, pod, addr)
		at = start.Sub(since)
		return (err == nil) == reach, fmt.Sprint(err)
	})
	return at
}

func nodeNames(t *testing.T) []string {
	t.Helper()
	l, err := env.client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	for _, n := range l.Items {
		out = append(out, n.Name)
	}
	return out
}

func waitServiceAccount(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 30*time.Second, 100*time.Millisecond, "the default ServiceAccount of "+ns, func() (bool, string) {
		_, err := env.client.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// storeNetworkPolicy checks the backend's NetworkPolicy on the walkthrough, as a tenant of
// another namespace would try it: a Pod of a namespace without a Binding reaches neither the
// master (RPC and admin) nor any member's transfer port, and an engine there configured by hand
// with the injected file (copied from a bound Pod) never writes; a bound Pod connects and moves
// bytes; a namespace granted a Binding is let in, and shut out again when the Binding goes,
// each within a delay measured here; the manager still reads the store throughout.
func (w *walk) storeNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	np, err := env.client.NetworkingV1().NetworkPolicies(systemNS).Get(ctx, backendName+"-store", metav1.GetOptions{})
	require.NoError(t, err, "the backend's NetworkPolicy is rendered by default")
	assert.Contains(t, fmt.Sprint(np.Spec.Ingress), "[team-a]", "it admits the walkthrough's bound namespace")
	var enforced string
	eventually(t, time.Minute, 500*time.Millisecond, "the manager measured the policy enforced", func() (bool, string) {
		c := condition(getBackend(t, backendName).Status.Conditions, kvv1.ConditionNetworkPolicyEnforced)
		if c == nil {
			return false, "no condition yet"
		}
		enforced = c.Message
		return c.Status == metav1.ConditionTrue, c.Reason + ": " + c.Message
	})

	// A bound Pod: its config file is what an outsider would copy.
	const bound = "np-bound"
	_ = deletePod(ctx, bindingNS, bound, 0)
	_, err = createPod(ctx, labelledPod(bound, bindingName, "1"), false)
	require.NoError(t, err)
	t.Cleanup(func() { _ = deletePod(context.Background(), bindingNS, bound, 0) })
	waitPodReadyIn(t, bindingNS, bound, 2*time.Minute)
	eventually(t, 30*time.Second, 250*time.Millisecond, "the bound Pod's puts good", func() (bool, string) {
		lines, err := engineLines(ctx, bindingNS, bound, "server", time.Now().Add(-2*time.Second))
		return err == nil && len(lines) > 0 && lines[len(lines)-1].ok(), fmt.Sprint(err)
	})
	config, err := kubectlOut(ctx, nil, "exec", "-n", bindingNS, bound, "-c", "server", "--", "cat", vocab.ConfigPath)
	require.NoError(t, err, "%s", config)

	// What there is to reach: the master's ports through its Service, each member's segment.
	svc, err := env.client.CoreV1().Services(systemNS).Get(ctx, backendName+"-leader", metav1.GetOptions{})
	require.NoError(t, err)
	targets := map[string]string{
		"master RPC":   fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, rpcPort),
		"master admin": fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, adminPort),
	}
	members := memberPodsByNode(t, backendName)
	require.NotEmpty(t, members)
	for _, m := range members {
		for _, port := range listeningPorts(t, m.Name, "member") {
			targets[fmt.Sprintf("member %s port %d", m.Name, port)] = fmt.Sprintf("%s:%d", m.Status.PodIP, port)
		}
	}

	outsider := "np-outsider"
	w.ensureNamespace(t, outsider)
	waitServiceAccount(t, outsider)
	shell := func(ns, name string) {
		t.Helper()
		_ = deletePod(ctx, ns, name, 0)
		_, err := env.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(0)), Containers: []corev1.Container{{
				Name: "c", Image: env.images["engine"], ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
			}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = deletePod(context.Background(), ns, name, 0) })
		waitPodReadyIn(t, ns, name, 2*time.Minute)
	}
	shell(outsider, "probe")
	shell(bindingNS, "np-bound-shell")
	// Every target at once: a refused connection takes its whole timeout to say so.
	type reach struct{ in, out error }
	results := map[string]reach{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for what, addr := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := reach{in: connect(ctx, bindingNS, "np-bound-shell", addr), out: connect(ctx, outsider, "probe", addr)}
			mu.Lock()
			results[what] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	var table []string
	for what, addr := range targets {
		r := results[what]
		assert.NoError(t, r.in, "a bound namespace's Pod reaches the %s (%s)", what, addr)
		assert.Error(t, r.out, "a Pod of a namespace without a Binding is kept from the %s (%s)", what, addr)
		table = append(table, fmt.Sprintf("%s: bound %s, unbound %s", what, verdict(r.in), verdict(r.out)))
	}
	slices.Sort(table)

	// The engine an outsider would run, with the bound Pod's own file: it never writes.
	_, err = env.client.CoreV1().ConfigMaps(outsider).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "copied"}, Data: map[string]string{"mooncake.json": string(config)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The bound Pod's launch line and environment as injection wrote them, its file at its path.
	injected, err := env.client.CoreV1().Pods(bindingNS).Get(ctx, bound, metav1.GetOptions{})
	require.NoError(t, err)
	c := injected.Spec.Containers[0]
	thief := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "copied-config", Namespace: outsider},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, ActiveDeadlineSeconds: ptr(int64(60)),
			Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "copied"}}}}},
			Containers: []corev1.Container{{
				Name: "server", Image: env.images["engine"], ImagePullPolicy: corev1.PullNever,
				Command: c.Command, Args: c.Args, Env: c.Env,
				VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: vocab.ConfigMountPath}},
			}}},
	}
	_, err = env.client.CoreV1().Pods(outsider).Create(ctx, thief, metav1.CreateOptions{})
	require.NoError(t, err)
	var ended *corev1.Pod
	eventually(t, 2*time.Minute, time.Second, "the engine with a copied configuration ended", func() (bool, string) {
		p, err := env.client.CoreV1().Pods(outsider).Get(ctx, thief.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ended = p
		return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase)
	})
	lines, err := engineLines(ctx, outsider, thief.Name, "server", time.Time{})
	require.NoError(t, err)
	first := "none (still connecting when its deadline stopped it)"
	for i, l := range lines {
		assert.False(t, l.ok(), "an outsider's engine never writes: %v", l.data)
		assert.NotEqual(t, "config", l.data["stage"], "the copied configuration is complete: the engine fails at the store, not before")
		if i == 0 {
			first = fmt.Sprintf("stage %v, setup %v", l.data["stage"], l.data["setup"])
		}
	}
	table = append(table, fmt.Sprintf("an engine in %s with the bound Pod's copied mooncake.json: %s, no good round (first line: %s)", outsider, ended.Status.Phase, first))

	// Granted, then taken away: the policy follows the Binding.
	leaving := "np-leaving"
	w.ensureNamespace(t, leaving)
	waitServiceAccount(t, leaving)
	shell(leaving, "probe")
	master := targets["master RPC"]
	require.Error(t, connect(ctx, leaving, "probe", master), "no Binding yet: kept out")
	grant := &kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "np-leaving", Namespace: leaving},
		Spec: kvv1.KVCachePoolBindingSpec{PoolRef: kvv1.LocalReference{Name: poolName}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("64Mi")},
			Domain: kvv1.Domain{Name: "np-leaving", BlockSize: 64, Dtype: "bfloat16"}},
	}
	t0 := time.Now()
	require.NoError(t, env.kube.Create(ctx, grant))
	granted := untilReach(t, leaving, "probe", master, true, t0)
	t1 := time.Now()
	require.NoError(t, env.kube.Delete(ctx, grant))
	revoked := untilReach(t, leaving, "probe", master, false, t1)
	ok, msg := backendReady(getBackend(t, backendName), w.full)
	assert.True(t, ok, "the manager still reads the store: %s", msg)
	record(t, "store NetworkPolicy (kube-network-policies' evaluator): a new Binding's namespace let in after %s, shut out %s after its deletion; NetworkPolicyEnforced: %s; reachability:\n    %s",
		granted.Round(10*time.Millisecond), revoked.Round(10*time.Millisecond), enforced, strings.Join(table, "\n    "))
}

func verdict(err error) string {
	if err == nil {
		return "connects"
	}
	return "refused (times out)"
}

// listeningPorts are the TCP ports a container listens on beyond loopback (read from its
// network namespace's /proc/net/tcp and tcp6): what a member serves its segment and REST API on.
func listeningPorts(t *testing.T, pod, container string) []int {
	t.Helper()
	out, err := kubectlOut(context.Background(), nil, "exec", "-n", systemNS, pod, "-c", container, "--", "cat", "/proc/net/tcp", "/proc/net/tcp6")
	require.NoError(t, err, "%s", out)
	seen := map[int]bool{}
	var ports []int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" { // 0A: LISTEN
			continue
		}
		addr, port, ok := strings.Cut(f[1], ":")
		if !ok || addr == "0100007F" || addr == "00000000000000000000000001000000" {
			continue // loopback only
		}
		n, err := strconv.ParseInt(port, 16, 32)
		if err != nil || seen[int(n)] {
			continue
		}
		seen[int(n)] = true
		ports = append(ports, int(n))
	}
	slices.Sort(ports)
	require.NotEmpty(t, ports, "%s/%s listens on no port", systemNS, pod)
	return ports
}
