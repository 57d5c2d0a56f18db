// Package continuity proves, with the real Mooncake master, members and client from PyPI and
// the operator's manager against a real kube-apiserver, what the store keeps through the
// operations the operator performs on it: members it replaces leave with their objects moved
// (every object reads back byte for byte), and objects lost anyway (a member killed) are counted
// exactly as the engines miss them. The kubelet and the DaemonSet controller are played by the
// test: it stops a member process when its Pod is deleted and starts the replacement.
package continuity

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/internal/testenv"
)

const (
	systemNamespace = "gpustack-system"
	backendName     = "mooncake-dram"
	tenant          = "team-a"
	objects         = 60
	objectBytes     = 256 << 10
	segmentBytes    = 96 << 20
)

// member is one member Pod and the process that runs it.
type member struct {
	pod  *corev1.Pod
	proc *mooncaketest.Proc
	node string
}

func TestMembersTheOperatorReplacesKeepEveryObject(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{Tenants: []string{tenant}})
	env := testenv.StartForTest(t, "the store continuity test")
	c := env.Client
	ctx := context.Background()
	startManager(t, env, strings.TrimPrefix(m.Admin, "http://"))
	for name, value := range kvv1.SettingCatalog() {
		require.NoError(t, c.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}))
	}
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}))
	b := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}, Spec: kvv1.KVCacheBackendSpec{
		Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Leader: kvv1.Leader{ElectionBackend: kvv1.ElectionNone},
			Members: []kvv1.MemberGroup{{
				NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, CapacityPerMember: *resource.NewQuantity(segmentBytes, resource.BinarySI),
				DrainTimeout: &metav1.Duration{Duration: time.Minute},
			}},
		}},
	}}
	require.NoError(t, c.Create(ctx, b))
	leader := &appsv1.Deployment{}
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: generator.LeaderName(backendName)}, leader) == nil
	}, 20*time.Second, 100*time.Millisecond)
	leader.Status = appsv1.DeploymentStatus{ObservedGeneration: leader.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, c.Status().Update(ctx, leader))

	// Two members, as the DaemonSet controller and the kubelet would run them.
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}
	next := 0
	start := func(node string) member {
		t.Helper()
		ds := memberDaemonSet(t, c)
		ip := ips[next]
		next++
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: fmt.Sprintf("%s-%s-%d", ds.Name, node, next), Labels: ds.Spec.Template.Labels},
			Spec: *ds.Spec.Template.Spec.DeepCopy()}
		p.Spec.NodeName = node
		require.NoError(t, c.Create(ctx, p))
		proc, _ := mooncaketest.StartMember(t, bin, m, p.Name, ip, segmentBytes)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		require.NoError(t, c.Status().Update(ctx, p))
		return member{pod: p, proc: proc, node: node}
	}
	members := []member{start("node-0"), start("node-1")}
	waitMounted(t, c, 2)

	cl := mooncaketest.StartClient(t, bin, m, tenant)
	keys := mooncaketest.Keys("continuity", objects)
	cl.Put(t, keys, objectBytes) // written, never read: a read would lease them and hold their move

	// The member group changes: each member is drained through the master, then deleted; the
	// test stops its process and starts the replacement, as the kubelet would.
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Spec.Connection.Managed.Members[0].ExtraEnv = []corev1.EnvVar{{Name: "KVCACHE_E2E_CHANGE", Value: "1"}}
	require.NoError(t, c.Update(ctx, b))
	t0 := time.Now()
	drained := map[string]bool{}
	for round := 0; round < 2; round++ {
		var gone *member
		require.Eventually(t, func() bool {
			cur := &kvv1.KVCacheBackend{}
			if c.Get(ctx, client.ObjectKeyFromObject(b), cur) == nil {
				for _, d := range cur.Status.Drains {
					drained[d.Pod] = true
				}
			}
			for i := range members {
				p := &corev1.Pod{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(members[i].pod), p); err == nil && p.DeletionTimestamp != nil {
					gone = &members[i]
					return true
				}
			}
			return false
		}, 3*time.Minute, 200*time.Millisecond, "round %d: a stale member deleted", round+1)
		assert.True(t, drained[gone.pod.Name], "%s was drained before it was deleted (status.drains named it)", gone.pod.Name)
		// The kubelet stops the member (its preStop would find nothing left to drain) and the
		// DaemonSet controller starts the replacement on the same node.
		gone.proc.Signal(syscall.SIGTERM)
		gone.proc.Wait(t, 30*time.Second)
		require.NoError(t, c.Delete(ctx, gone.pod, client.GracePeriodSeconds(0)))
		*gone = start(gone.node)
		waitMounted(t, c, 2)
	}
	took := time.Since(t0)

	reads := cl.Get(t, keys, objectBytes)
	assert.Empty(t, reads.Wrong, "no read returns another key's bytes")
	assert.Len(t, reads.OK, objects, "every object reads back after both members were replaced (missing: %v)", reads.Missing)
	cur := &kvv1.KVCacheBackend{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b), cur))
	assert.Nil(t, cur.Status.Lost, "nothing was lost")
	t.Logf("both members replaced, each drained first, in %s: %d/%d objects read back byte for byte, %d wrong; drained events: %s",
		took.Round(100*time.Millisecond), len(reads.OK), objects, len(reads.Wrong), strings.Join(notes(t, c, "MemberDrained"), " | "))

	// A member killed (no drain): the backend counts what the engines then miss.
	victim := members[0]
	victim.proc.Signal(syscall.SIGKILL)
	victim.proc.Wait(t, 10*time.Second)
	require.Eventually(t, func() bool {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b), cur))
		return cur.Status.Lost != nil && cur.Status.Lost.Last != nil
	}, 2*time.Minute, 500*time.Millisecond, "the loss counted")
	after := cl.Get(t, keys, objectBytes)
	assert.Empty(t, after.Wrong)
	l := cur.Status.Lost.Last
	assert.Equal(t, kvv1.LossMemberLost, l.Cause)
	assert.Equal(t, int64(len(after.Missing)), l.Objects, "the objects counted lost are the ones that miss")
	assert.Equal(t, int64(len(after.Missing))*objectBytes, l.Bytes.Value(), "and their bytes")
	assert.Contains(t, l.Member, victim.pod.Status.PodIP+":")
	assert.NotEmpty(t, notes(t, c, "ObjectsLost"))
	t.Logf("a member killed: %d of %d objects lost, counted %d (%s) on %s", len(after.Missing), objects, l.Objects, l.Bytes.String(), l.Member)
}

func memberDaemonSet(t *testing.T, c client.Client) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	require.Eventually(t, func() bool {
		return c.Get(context.Background(), client.ObjectKey{Namespace: systemNamespace, Name: generator.MemberName(backendName, 0)}, ds) == nil
	}, 20*time.Second, 100*time.Millisecond)
	return ds
}

// waitMounted waits until the backend reports n members registered with the master.
func waitMounted(t *testing.T, c client.Client, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		b := &kvv1.KVCacheBackend{}
		if c.Get(context.Background(), client.ObjectKey{Name: backendName}, b) != nil {
			return false
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, kvv1.ConditionMembersMounted)
		return cond != nil && cond.Status == metav1.ConditionTrue && len(b.Status.Members) == n
	}, time.Minute, 200*time.Millisecond, "%d members mounted", n)
}

func notes(t *testing.T, c client.Client, reason string) []string {
	t.Helper()
	l := &eventsv1.EventList{}
	require.NoError(t, c.List(context.Background(), l))
	var out []string
	for _, e := range l.Items {
		if e.Reason == reason && e.Regarding.Name == backendName {
			out = append(out, e.Note)
		}
	}
	return out
}

// startManager starts the operator's manager (controllers only), with the backend's admin API
// at adminAddr; it stops when the test ends.
func startManager(t *testing.T, env *testenv.Env, adminAddr string) {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{
		SystemNamespace: systemNamespace, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		AdminAddress: func(*kvv1.KVCacheBackend) string { return adminAddr },
		PollInterval: time.Second, DisableWebhooks: true,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("manager stopped: %v", err)
		}
	})
}
