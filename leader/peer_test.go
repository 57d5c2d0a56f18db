package leader

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	"github.com/kvcache-operator/kvcache/vocab"
)

func leaderPodObj(name, ip, instance string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{
			vocab.LabelName: vocab.StoreName, vocab.LabelInstance: instance, vocab.LabelComponent: "leader",
		}},
		Status: corev1.PodStatus{PodIP: ip},
	}
}

var acquired = time.Date(2026, 12, 1, 9, 0, 0, 123456000, time.UTC)

// heldLease is the Lease as the holder "a" wrote it.
func heldLease(holder string) *coordinationv1.Lease {
	at := metav1.NewMicroTime(acquired)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "store-leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](10),
			AcquireTime: &at, RenewTime: &at, LeaseTransitions: ptr.To[int32](4)},
	}
}

func aTerm() term {
	return termOf(resourcelock.LeaderElectionRecord{HolderIdentity: "a", AcquireTime: metav1.NewTime(acquired), LeaderTransitions: 4})
}

// peerFixture is launcher `me` of backend "store" with the Pods a (10.0.0.1), b (10.0.0.2) and
// x (10.0.0.3, another backend's), and the Lease held by a.
func peerFixture(t *testing.T, me string) (*peerNet, *fencedLock, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(
		leaderPodObj("a", "10.0.0.1", "store"), leaderPodObj("b", "10.0.0.2", "store"), leaderPodObj("x", "10.0.0.3", "other"),
		heldLease("a"))
	c := Config{Client: cs, LeaseNamespace: "ns", LeaseName: "store-leader", Identity: me, PodNamespace: "ns", PodName: me,
		LeaseDuration: 10 * time.Second, RetryPeriod: time.Second, PeerPort: 9004, MaxHold: time.Minute, Log: logr.Discard()}
	inner := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "ns", Name: "store-leader"}, Client: cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: me}}
	lock := newFencedLock(inner, time.Now)
	lock.gate = &takeoverGate{maxHold: c.MaxHold}
	_, _, err := lock.Get(context.Background())
	require.NoError(t, err)
	p := &peerNet{c: c, lock: lock, log: logr.Discard(), peers: map[string]string{}, holders: map[string]string{}}
	return p, lock, cs
}

// asHolder makes the fixture's launcher "a" take the released Lease as aTerm.
func asHolder(t *testing.T, lock *fencedLock, cs *fake.Clientset) {
	t.Helper()
	released := heldLease("")
	_, err := cs.CoordinationV1().Leases("ns").Update(context.Background(), released, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, _, err = lock.Get(context.Background())
	require.NoError(t, err)
	require.NoError(t, lock.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaseDurationSeconds: 10,
		AcquireTime: metav1.NewTime(acquired), RenewTime: metav1.NewTime(acquired), LeaderTransitions: 4}))
	lock.setLeading(true)
}

func TestHelloAcknowledgesOnlyALeaderPodOfTheSameBackendAtItsOwnAddress(t *testing.T) {
	p, lock, cs := peerFixture(t, "a")
	ctx := context.Background()
	assert.Equal(t, helloAnswer{Reason: "this launcher does not lead"}, p.hello(ctx, helloRequest{Identity: "b", Term: aTerm()}, "10.0.0.2"))

	asHolder(t, lock, cs)
	stale := aTerm()
	stale.Transitions = 3
	got := p.hello(ctx, helloRequest{Identity: "b", Term: stale}, "10.0.0.2")
	assert.False(t, got.Acked)
	assert.Contains(t, got.Reason, "this launcher leads term a (acquired 2026-12-01T09:00:00.123456Z, transition 4), not a (acquired 2026-12-01T09:00:00.123456Z, transition 3)")

	got = p.hello(ctx, helloRequest{Identity: "b", Term: aTerm()}, "10.0.0.66")
	assert.Equal(t, helloAnswer{Reason: "Pod b has IP 10.0.0.2; the call came from 10.0.0.66"}, got, "a tenant cannot introduce itself as a peer")
	got = p.hello(ctx, helloRequest{Identity: "x", Term: aTerm()}, "10.0.0.3")
	assert.Equal(t, helloAnswer{Reason: `Pod x is not a leader Pod of this backend (label app.kubernetes.io/instance="other", this Pod's "store")`}, got)
	got = p.hello(ctx, helloRequest{Identity: "gone", Term: aTerm()}, "10.0.0.4")
	assert.False(t, got.Acked)
	assert.Contains(t, got.Reason, `reading the caller's Pod: pods "gone" not found`)
	peers, _ := p.peerSnapshot()
	assert.Empty(t, peers)

	assert.Equal(t, helloAnswer{Acked: true}, p.hello(ctx, helloRequest{Identity: "b", Term: aTerm()}, "10.0.0.2"))
	peers, v := p.peerSnapshot()
	assert.Equal(t, map[string]string{"b": "10.0.0.2"}, peers)
	p.hello(ctx, helloRequest{Identity: "b", Term: aTerm()}, "10.0.0.2")
	assert.Equal(t, v, p.peerVersion(), "greeting again adds nothing")

	p.goodbye(goodbyeRequest{Identity: "b"}, "10.0.0.9")
	peers, _ = p.peerSnapshot()
	assert.Len(t, peers, 1, "a goodbye from elsewhere is ignored")
	p.goodbye(goodbyeRequest{Identity: "b"}, "10.0.0.2")
	peers, _ = p.peerSnapshot()
	assert.Empty(t, peers)
}

func TestPruneForgetsPeersWhosePodsAreGone(t *testing.T) {
	p, _, cs := peerFixture(t, "a")
	p.peers = map[string]string{"b": "10.0.0.2", "c": "10.0.0.5"}
	p.prune(context.Background())
	peers, _ := p.peerSnapshot()
	assert.Equal(t, map[string]string{"b": "10.0.0.2"}, peers)

	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	p.prune(context.Background())
	peers, _ = p.peerSnapshot()
	assert.Len(t, peers, 1, "an unanswered read is not a deleted Pod")
}

func leaseRenewTime(t *testing.T, cs *fake.Clientset) time.Time {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("ns").Get(context.Background(), "store-leader", metav1.GetOptions{})
	require.NoError(t, err)
	return l.Spec.RenewTime.Time
}

func TestHoldRenewsForTheHolderWhenTheAPIServerAnswers(t *testing.T) {
	p, _, cs := peerFixture(t, "b")
	ctx := context.Background()
	before := leaseRenewTime(t, cs)
	got := p.hold(ctx, freshHold(), "10.0.0.1")
	assert.Equal(t, verdictRefused, got.Verdict, "a standby that never resolved the holder's Pod trusts no caller")

	p.holders["a"] = "10.0.0.1"
	got = p.hold(ctx, freshHold(), "10.0.0.3")
	assert.Equal(t, holdAnswer{Verdict: verdictRefused, Reason: `the call came from 10.0.0.3, not from the Pod of a this launcher greeted ("10.0.0.1")`}, got)

	got = p.hold(ctx, freshHold(), "10.0.0.1")
	assert.Equal(t, holdAnswer{Verdict: verdictRenewed, Holder: "a"}, got)
	l, err := cs.CoordinationV1().Leases("ns").Get(ctx, "store-leader", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, l.Spec.RenewTime.After(before), "renewed")
	assert.Equal(t, "a", *l.Spec.HolderIdentity)
	assert.Equal(t, acquired, l.Spec.AcquireTime.Time, "the term is kept")
	assert.Equal(t, int32(4), *l.Spec.LeaseTransitions)
}

func TestHoldSaysLostWhenTheLeaseNamesAnotherTerm(t *testing.T) {
	p, _, cs := peerFixture(t, "b")
	p.holders["a"] = "10.0.0.1"
	_, err := cs.CoordinationV1().Leases("ns").Update(context.Background(), heldLease("c"), metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, holdAnswer{Verdict: verdictLost, Holder: "c"}, p.hold(context.Background(), freshHold(), "10.0.0.1"))

	// A launcher that leads answers for itself.
	p2, lock2, _ := peerFixture(t, "b")
	p2.holders["a"] = "10.0.0.1"
	lock2.setLeading(true)
	assert.Equal(t, holdAnswer{Verdict: verdictLost, Holder: "b", Reason: "this launcher leads"}, p2.hold(context.Background(), freshHold(), "10.0.0.1"))
}

func TestHoldPromisesWhenTheAPIServerIsAwayAndKeepsThePromise(t *testing.T) {
	p, lock, cs := peerFixture(t, "b")
	p.holders["a"] = "10.0.0.1"
	lock.setAcked(aTerm())
	cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	})
	got := p.hold(context.Background(), freshHold(), "10.0.0.1")
	assert.Equal(t, holdAnswer{Verdict: verdictPromised, Reason: "the API server did not answer: dial tcp 10.96.0.1:443: connect: connection refused"}, got)
	err := beginTakeoverNow(lock)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not taking the Lease over from a: promised its term to stay standby until")
}

// freshHold is a hold request for aTerm sent now.
func freshHold() holdRequest {
	return holdRequest{Term: aTerm(), Sent: time.Now().UnixNano(), Wait: time.Second}
}

// A request read after the holder stopped waiting for it (this launcher was stopped, or
// starved) is not acted on: the holder may be gone, and a renewal would hold up the takeover.
func TestHoldIgnoresAStaleRequest(t *testing.T) {
	p, _, cs := peerFixture(t, "b")
	p.holders["a"] = "10.0.0.1"
	before := leaseRenewTime(t, cs)
	stale := freshHold()
	stale.Sent = time.Now().Add(-3 * time.Second).UnixNano()
	got := p.hold(context.Background(), stale, "10.0.0.1")
	assert.Equal(t, verdictRefused, got.Verdict)
	assert.Contains(t, got.Reason, "old by this launcher's clock")
	assert.Equal(t, before, leaseRenewTime(t, cs), "nothing renewed")

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, holdAnswer{Verdict: verdictRefused, Reason: "the holder stopped waiting"}, p.hold(gone, freshHold(), "10.0.0.1"))
}

// Two peers renewing for the holder at once: the one whose write conflicts reads the Lease
// again and still answers renewed, since it names the same term.
func TestHoldAfterAConflictingRenewalStillRenews(t *testing.T) {
	p, _, cs := peerFixture(t, "b")
	p.holders["a"] = "10.0.0.1"
	conflicts := 0
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		conflicts++
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), "store-leader", errors.New("the object has been modified"))
	})
	assert.Equal(t, holdAnswer{Verdict: verdictRenewed, Holder: "a"}, p.hold(context.Background(), freshHold(), "10.0.0.1"))
	assert.Equal(t, 1, conflicts)
}

func beginTakeoverNow(l *fencedLock) error {
	if err := l.beginTakeover(); err != nil {
		return err
	}
	l.endTakeover()
	return nil
}

// freePort is a port free on 127.0.0.1 and 127.0.0.2 alike (one loopback interface).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// Two launchers over real HTTP: the standby greets the holder, which acknowledges it; with the
// API server away from both, the holder's round gets the standby's promise; with it back for
// the standby, the standby renews the Lease for the holder.
func TestPeersOverHTTP(t *testing.T) {
	port := freePort(t)
	cs := fake.NewClientset(leaderPodObj("a", "127.0.0.1", "store"), leaderPodObj("b", "127.0.0.2", "store"), heldLease("a"))
	away := false
	cs.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if away {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	start := func(me, ip string) (*peerNet, *fencedLock) {
		c := Config{Client: cs, LeaseNamespace: "ns", LeaseName: "store-leader", Identity: me, PodNamespace: "ns", PodName: me,
			LeaseDuration: 10 * time.Second, RetryPeriod: 200 * time.Millisecond, PeerPort: port, PeerAddress: net.JoinHostPort(ip, strconv.Itoa(port)), MaxHold: time.Minute, Log: logr.Discard()}
		inner := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "ns", Name: "store-leader"}, Client: cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: me}}
		lock := newFencedLock(inner, time.Now)
		lock.gate = &takeoverGate{maxHold: c.MaxHold}
		p, err := c.startPeers(context.Background(), lock, logr.Discard())
		require.NoError(t, err)
		t.Cleanup(p.stop)
		return p, lock
	}
	a, aLock := start("a", "127.0.0.1")
	b, bLock := start("b", "127.0.0.2")
	asHolder(t, aLock, cs)
	_, _, err := bLock.Get(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	greeted := make(chan struct{})
	go func() { defer close(greeted); b.greet(ctx) }()
	require.Eventually(t, func() bool { return bLock.isAcked(aTerm()) }, 5*time.Second, 20*time.Millisecond, "the holder acknowledges the standby")
	cancel()
	<-greeted
	peers, _ := a.peerSnapshot()
	assert.Equal(t, map[string]string{"b": "127.0.0.2"}, peers)

	away = true
	o := judgeRound(a.round(context.Background()))
	assert.Equal(t, holdOutcome{allPromised: true}, o)
	require.Error(t, beginTakeoverNow(bLock), "b promised")

	away = false
	before := leaseRenewTime(t, cs)
	o = judgeRound(a.round(context.Background()))
	assert.Equal(t, holdOutcome{renewedBy: "b"}, o)
	assert.True(t, leaseRenewTime(t, cs).After(before))
}
