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
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
