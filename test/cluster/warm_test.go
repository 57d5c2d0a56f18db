package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator/backend"
	"github.com/kvcache-operator/kvcache/values"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The warm store's names, as test/cluster/warm declares them.
const (
	warmBackend = "mooncake-warm"
	warmPool    = "warm-dram"
	warmBinding = "warm"
	warmEtcd    = "store-etcd"
	warmProbe   = "probe-warm"
	// warmLeaders is the leader replicas of test/cluster/warm/store.yaml: the serving master
	// and two standbys.
	warmLeaders = 3
	// The probe's put rounds: often, to time the first good put after a failover closely, and
	// small, so the objects they leave stay far below the store's capacity for the whole test
	// (nothing the probe cares about is ever evicted).
	warmProbePeriod = "0.5"
	warmRoundBytes  = "4096"
)

// warmWalk is TestWarmFailover's state: the walkthrough's (release, namespaces, cleanup) plus
// the warm store's.
type warmWalk struct {
	*walk
	etcd, store []byte // test/cluster/warm's manifests
	probe       *probe
	first       int // this test's first entry in figures
}

// TestWarmFailover is the walkthrough's failover step on a store with warm failover, as a user
// sets it up: the chart installed with its default values, an etcd the user runs, a backend with
// electionBackend: Etcd and three leader replicas naming it, a pool and a Binding, and an engine
// injected through the webhook that put objects it reads back. The serving leader Pod is deleted
// three times and its master killed three times; each time a standby takes over holding every
// object (none missing, none another key's bytes), and the operator says so (status, event, the
// FAILOVER column). A member deleted during a failover loses no object held elsewhere and reads
// back none wrong; a member killed during one reads back none wrong either, and the operator
// counts what it held lost. Then everything is deleted and the release uninstalled, leaving
// nothing.
func TestWarmFailover(t *testing.T) {
	ww := &warmWalk{walk: newWalk(t), first: len(figures)}
	t.Cleanup(func() {
		_ = deletePod(context.Background(), bindingNS, warmProbe, 0)
		ww.cleanup(t)
	})

	ww.step(t, "helm install --wait with the default values", ww.install)
	ww.step(t, "an etcd, then the warm store: Ready with both members' capacity, one master serving and two standing by", ww.apply)
	ww.step(t, "an engine injected with the warm store's address puts its probe objects", ww.startProbe)
	ww.measureWarm(t, "a real engine's prompt survives a killed master: loaded back from the store the standby kept", ww.realEngine)
	// Each measurement's failure is reported, and the teardown still runs and is checked.
	ww.measureWarm(t, "warm failover: the serving leader Pod deleted, its master killed; every object kept", ww.failover)
	ww.measureWarm(t, "warm failover with a member Pod deleted at the same time: nothing wrong, the other member's objects kept", ww.memberDuringFailover)
	ww.measureWarm(t, "warm failover with a member killed at the same time: nothing wrong, the other member's objects kept, the dead member's counted lost", ww.memberKilledDuringFailover)
	ww.step(t, "the objects deleted, then helm uninstall: nothing left", ww.teardown)

	t.Logf("figures:\n  %s", strings.Join(figures[ww.first:], "\n  "))
}

// measureWarm runs a subtest whose failure does not stop the test: the store is brought back to
// its steady state before the next step either way.
func (ww *warmWalk) measureWarm(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	t0 := time.Now()
	t.Run(name, fn)
	t.Logf("%s: %s", name, time.Since(t0).Round(100*time.Millisecond))
	eventually(t, 6*time.Minute, 500*time.Millisecond, "the warm store Ready with full capacity after "+name, func() (bool, string) {
		return backendReady(getBackend(t, warmBackend), ww.full)
	})
}

func (ww *warmWalk) install(t *testing.T) {
	ww.ensureNamespace(t, systemNS) // the README: the stores' namespace exists before the install
	took := helmInstall(t, "--wait", "--timeout", "3m")
	record(t, "warm: helm install --wait (defaults): %s", took.Round(100*time.Millisecond))
	ww.ensureNamespace(t, bindingNS)
}

func (ww *warmWalk) apply(t *testing.T) {
	ctx := context.Background()
	var err error
	ww.etcd, err = os.ReadFile(filepath.Join(env.repo, "test", "cluster", "warm", "etcd.yaml"))
	require.NoError(t, err)
	ww.store, err = os.ReadFile(filepath.Join(env.repo, "test", "cluster", "warm", "store.yaml"))
	require.NoError(t, err)
	// Whatever fails from here, the cleanup deletes the store before its etcd.
	ww.manifests = slices.Concat(ww.store, []byte("\n---\n"), ww.etcd)

	// The etcd runs the image hack/images.sh builds (and loaded).
	out, err := script("hack/images.sh", "name", "etcd")
	require.NoError(t, err, out)
	etcdImage := strings.TrimSpace(out)
	assert.Contains(t, string(ww.etcd), "image: "+etcdImage, "test/cluster/warm/etcd.yaml runs %s", etcdImage)

	t0 := time.Now()
	kubectl(t, ww.etcd, "apply", "-f", "-")
	kubectl(t, nil, "-n", systemNS, "rollout", "status", "deployment/"+warmEtcd, "--timeout=2m")
	etcdReady := time.Since(t0)

	var perMember resource.Quantity
	for _, doc := range strings.Split(string(ww.store), "\n---\n") {
		var b kvv1.KVCacheBackend
		if sigsyaml.Unmarshal([]byte(doc), &b) == nil && b.Kind == "KVCacheBackend" {
			perMember = b.Spec.Connection.Managed.Members[0].CapacityPerMember
			require.Equal(t, int32(warmLeaders), *b.Spec.Connection.Managed.Leader.Replicas)
		}
	}
	require.False(t, perMember.IsZero(), "test/cluster/warm/store.yaml has a backend")
	ww.full = int64(len(env.sockets)) * perMember.Value()

	t1 := time.Now()
	out = kubectl(t, ww.store, "apply", "-f", "-")
	t.Logf("kubectl apply -f test/cluster/warm/store.yaml:\n%s", out)
	var b *kvv1.KVCacheBackend
	at := eventually(t, 4*time.Minute, 250*time.Millisecond, "the warm backend Ready with every member's capacity", func() (bool, string) {
		b = getBackend(t, warmBackend)
		ok, msg := backendReady(b, ww.full)
		if !ok {
			msg += "; " + warmPodsSummary(t)
		}
		return ok, msg
	})
	record(t, "warm: kubectl apply of an etcd (ready in %s) then of the warm store to the backend Ready with full capacity (%d members x %s, %d leader replicas): %s",
		etcdReady.Round(100*time.Millisecond), len(env.sockets), perMember.String(), warmLeaders, at.Sub(t1).Round(100*time.Millisecond))

	// The masters run in the store's etcd HA mode, naming the etcd applied above.
	d, err := env.client.AppsV1().Deployments(systemNS).Get(ctx, warmBackend+"-leader", metav1.GetOptions{})
	require.NoError(t, err)
	args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	t.Logf("the warm master's command: %v %s", d.Spec.Template.Spec.Containers[0].Command, args)
	for _, want := range []string{"-enable_ha=true", "-ha_backend_type=etcd", "-ha_backend_connstring=store-etcd.gpustack-system.svc:2379", "-enable_oplog=true",
		"-cluster_id=" + warmBackend + "-" + string(b.UID)} {
		assert.Contains(t, args, want)
	}

	// One member on each node; one master serving, the others standing by.
	members := memberPodsByNode(t, warmBackend)
	assert.Len(t, members, len(env.sockets), "a member on each node: %v", members)
	serving := ww.waitSteady(t, "")
	t.Logf("serving master: %s on %s", serving.Name, serving.Spec.NodeName)
	ok, msg := backendReady(b, ww.full)
	require.True(t, ok, msg)
	require.NotNil(t, b.Status.Leader)
	assert.Equal(t, kvv1.FailoverWarm, b.Status.Leader.Failover, "status.leader.failover")
	assert.Equal(t, "Warm", failoverColumn(t), "kubectl get kvcb -o wide: FAILOVER")

	// Members and engines reach the serving master through the leader Service, as with the
	// Lease: the etcd is the masters' alone, so nothing else is given its address.
	var pool kvv1.KVCachePool
	require.NoError(t, env.kube.Get(ctx, client.ObjectKey{Name: warmPool}, &pool))
	assert.Equal(t, generator.ClientEndpoint(warmBackend, systemNS, storeDefaults(t)), pool.Status.ClientEndpoint, "the pool hands engines the leader Service")
	assert.Equal(t, clientEndpoint(b), pool.Status.ClientEndpoint, "the pool publishes the backend's Client endpoint")
	for _, m := range members {
		spec, err := json.Marshal(m.Spec.Containers)
		require.NoError(t, err)
		assert.NotContains(t, string(spec), warmEtcd, "member %s is not given the etcd", m.Name)
	}

	mem, procs := clusterMemory(t)
	record(t, "warm: cluster memory with the warm store running (%d leader replicas, %d members, an etcd, %d managers): %.0f MiB resident over %d processes",
		warmLeaders, len(members), ww.chart.Replicas, mem, procs)
}

// startProbe starts the probe engine: injected through the webhook against the warm Binding,
// it puts its objects once, then a small object every half second.
func (ww *warmWalk) startProbe(t *testing.T) {
	ctx := context.Background()
	const name = warmProbe
	p := labelledPod(name, warmBinding, warmProbePeriod)
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PAYLOAD_BYTES", Value: warmRoundBytes},
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PROBE_OBJECTS", Value: fmt.Sprint(probeObjects)},
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PROBE_BYTES", Value: "65536"})
	created, err := createPod(ctx, p, false)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(created.Annotations[injectedKey]), &rec), "injected: %v", created.Annotations)
	assert.Equal(t, warmBinding, rec["binding"])

	ready := waitPodReadyIn(t, bindingNS, name, 2*time.Minute) // ready = a put and a get succeeded
	ww.probe = &probe{name: name, ip: ready.Status.PodIP}
	eventually(t, time.Minute, 500*time.Millisecond, "the probe's objects written", func() (bool, string) {
		r, err := ww.probe.read()
		if err != nil {
			return false, err.Error()
		}
		return r.Written == probeObjects && r.Kept == probeObjects, fmt.Sprintf("%+v", r)
	})
	r := ww.probe.mustRead(t)
	require.Equal(t, probeObjects, r.Kept)
	// The operator counts what a new master kept against its last read of the master before,
	// which comes at least once a poll interval: from then on the probe's objects are counted.
	time.Sleep(backend.DefaultPollInterval + 2*time.Second)

	// The engine reached the store at the address its pool publishes, and was given nothing of
	// the etcd.
	var pool kvv1.KVCachePool
	require.NoError(t, env.kube.Get(ctx, client.ObjectKey{Name: warmPool}, &pool))
	line := firstJSONLine(t, bindingNS, name, "server")
	assert.Equal(t, true, line["ok"], "%v", line)
	assert.Equal(t, pool.Status.ClientEndpoint, line["master"], "the engine's master address")
	injected, err := json.Marshal(created)
	require.NoError(t, err)
	assert.NotContains(t, string(injected), warmEtcd, "the engine is not given the etcd")
	record(t, "warm: the probe engine injected (master %q) on %s put its %d objects of 64 KiB",
		line["master"], ready.Spec.NodeName, probeObjects)
}

// warmRun is one measured failover.
type warmRun struct {
	t0      time.Time
	a, b, c time.Duration
	// seen is when the backend's status first reported the failover (b needs full capacity too).
	seen     time.Duration
	failover kvv1.FailoverObserved
	probe    probeResult
	from, to string // the serving leader Pod before and after
	// keysBefore is the object count of the master before, read just before it went.
	keysBefore int64
	// views are the election views (etcd revisions) of the master before and the new one.
	views [2]string
}

// assertWarm checks a run that nothing but the failover disturbed: every probe object read back
// its own bytes, and the operator reported a warm failover that kept every object.
func assertWarm(t *testing.T, r warmRun) {
	t.Helper()
	assert.Equal(t, probeObjects, r.probe.Written)
	assert.Equal(t, r.probe.Written, r.probe.Kept, "every probe object kept: %+v", r.probe)
	assert.Zero(t, r.probe.Missing, "no probe object missing: %+v", r.probe)
	assert.Zero(t, r.probe.Wrong, "no probe object read back another key's bytes: %+v", r.probe)
	assert.Equal(t, kvv1.FailoverWarm, r.failover.Mode, "status.leader.lastFailover.mode: %+v", r.failover)
	assert.Zero(t, r.failover.Lost, "status.leader.lastFailover.lost: %+v", r.failover)
	// The store holds the probe's objects and its rounds' (one small object each), nothing else.
	// (The operator counts them at its last read of the master before, so kept is about
	// keysBefore, a few rounds more or less.)
	assert.GreaterOrEqual(t, r.failover.Kept, int64(probeObjects), "status.leader.lastFailover.kept counts the probe's objects: %+v", r.failover)
}

// warmNextPutGoal is how soon after a new master serves the engine's next put comes in the best
// run of a kind; warmNextPutCeiling bounds every run: the store client's 30 s connect timeout,
// which a dial into a gone Pod's address waits out, and a margin.
const (
	warmNextPutGoal    = 10 * time.Second
	warmNextPutCeiling = 40 * time.Second
)

func (ww *warmWalk) failover(t *testing.T) {
	for _, crash := range []bool{false, true} {
		how := "leader Pod deleted (graceful)"
		if crash {
			how = "leader killed (SIGKILL through the node's containerd)"
		}
		var a, b, c, gaps stats
		for i := 1; i <= failoverRuns; i++ {
			r := ww.failoverRun(t, crash, nil)
			assertWarm(t, r)
			// A client that dialled the gone Pod's address waits out its 30 s connect timeout:
			// no run may wait longer than that and a margin.
			assert.Less(t, r.c, r.a+warmNextPutCeiling, "run %d: the probe's next put after a new master serves", i)
			a, b, c, gaps = append(a, r.a), append(b, r.b), append(c, r.c), append(gaps, r.c-r.a)
			record(t, "warm, %s, run %d: %s -> %s (election view %s -> %s); (a) a new master serves after %s, (b) Ready with full capacity and lastFailover %s kept %d lost %d (the master before held %d objects as it went) after %s (the failover reported after %s), (c) the probe's next put after %s; probe objects kept %d, missing %d, wrong %d of %d",
				how, i, r.from, r.to, r.views[0], r.views[1], r.a.Round(10*time.Millisecond), r.failover.Mode, r.failover.Kept, r.failover.Lost, r.keysBefore, r.b.Round(10*time.Millisecond), r.seen.Round(10*time.Millisecond),
				r.c.Round(10*time.Millisecond), r.probe.Kept, r.probe.Missing, r.probe.Wrong, r.probe.Written)
			if t.Failed() {
				return // the store is not where the next run can start from
			}
		}
		// The preStop linger keeps a graceful handover's next put off the gone address; one run
		// on a loaded machine can still dial it while kube-proxy lags behind the endpoints (seen:
		// 29.6 s), until the clients' connect timeout is bounded. A linger that no longer works
		// makes every run wait.
		assert.Less(t, gaps.best(), warmNextPutGoal, "%s: the best run's next put within %s of a new master serving (%s)", how, warmNextPutGoal, gaps)
		record(t, "warm failover, %s -> (a) a new master serves: %s", how, a)
		record(t, "warm failover, %s -> (b) full capacity and a Warm lastFailover in status: %s", how, b)
		record(t, "warm failover, %s -> (c) a client put succeeds: %s", how, c)
	}

	// What the user reads afterwards.
	b := getBackend(t, warmBackend)
	require.NotNil(t, b.Status.Leader)
	assert.Equal(t, kvv1.FailoverWarm, b.Status.Leader.Failover, "status.leader.failover")
	out := kubectl(t, nil, "get", "kvcb", warmBackend, "-o", "wide")
	t.Logf("kubectl get kvcb -o wide:\n%s", out)
	assert.Equal(t, "Warm", failoverColumn(t), "kubectl get kvcb -o wide: FAILOVER")
	events := objectEvents(context.Background(), t, "", warmBackend, "WarmFailover")
	assert.GreaterOrEqual(t, len(events), 1, "WarmFailover events")
	t.Logf("WarmFailover events: %q", events)
	assert.Empty(t, objectEvents(context.Background(), t, "", warmBackend, "ColdCache"), "no ColdCache event on the warm store")
	if b.Status.Lost != nil {
		assert.Zero(t, b.Status.Lost.Objects, "the store counted no loss: %+v", b.Status.Lost)
	}
	mem, procs := clusterMemory(t)
	record(t, "warm: cluster memory after the failovers (%d leader replicas, 2 members, an etcd, %d managers, the probe): %.0f MiB resident over %d processes",
		warmLeaders, ww.chart.Replicas, mem, procs)
}

// failoverRun fails the serving master over once (alongside, when also is given, that action)
// and measures from the moment it acted when (a) a new master serves through the leader
// Service, (b) the backend's status is Ready with full capacity and reports the failover, and
// (c) the probe's next put succeeds; then it reads the probe's objects back.
func (ww *warmWalk) failoverRun(t *testing.T, crash bool, also func()) warmRun {
	t.Helper()
	ctx := context.Background()
	old := ww.waitSteady(t, ww.probe.name)
	before, err := readMaster(ctx)
	require.NoError(t, err, "the serving master before the failover")
	run := warmRun{from: old.Name, keysBefore: before.keys}
	run.views[0] = string(before.View)

	var t0 time.Time
	defer func() {
		if t.Failed() {
			t.Logf("failover of %s (crash %v) failed; the backend's events and the managers' log lines since:\n%s\nlogs since:\n%s",
				old.Name, crash, diagnoseBackend(ctx, warmBackend, t0, warmBackend, "error"), warmLogsSince(ctx, t0, ww.probe.name))
		}
	}()
	// What the leader Service routes to, as it changes, for a failover whose client lags.
	routes, stopRoutes := watchEndpoints(warmBackend + "-leader")
	defer stopRoutes()
	t0 = time.Now()
	run.t0 = t0
	if crash {
		killContainer(t, old)
	} else {
		require.NoError(t, env.client.CoreV1().Pods(systemNS).Delete(ctx, old.Name, metav1.DeleteOptions{}))
	}
	if also != nil {
		also()
	}

	// (a) The leader Service answers with a master process that is not the one before: its
	// view of the election moved, or its counters started over.
	aAt := eventually(t, 2*time.Minute, 50*time.Millisecond, "a new master serving through the leader Service", func() (bool, string) {
		now, err := readMaster(ctx)
		if err != nil {
			return false, err.Error()
		}
		run.views[1] = string(now.View)
		return now.ServiceReady && now.newerThan(before), fmt.Sprintf("%+v (before: %+v)", now, before)
	})
	run.a = aAt.Sub(t0)

	// (b) The status read from the new master: Ready with full capacity, the failover reported.
	// A member stopping alongside drains first, which may take minutes.
	bWithin := 2 * time.Minute
	if also != nil {
		bWithin = 6 * time.Minute
	}
	var notReady []string
	bAt := eventually(t, bWithin, 100*time.Millisecond, "the backend's status Ready with full capacity and a lastFailover after the failover", func() (bool, string) {
		cur := getBackend(t, warmBackend)
		reported := cur.Status.Leader != nil && cur.Status.Leader.LastFailover != nil && !cur.Status.Leader.LastFailover.Time.Time.Before(t0.Truncate(time.Second))
		if reported && run.seen == 0 {
			run.seen = time.Since(t0)
		}
		ok, msg := backendReady(cur, ww.full)
		if !ok {
			if reported {
				// What the status said between the failover's report and Ready, each change once.
				msg = fmt.Sprintf("%s; LeaderAvailable: %s; MembersMounted: %s", msg, conditionMessage(cur, kvv1.ConditionLeaderAvailable), conditionMessage(cur, kvv1.ConditionMembersMounted))
				if n := len(notReady); n == 0 || !strings.HasSuffix(notReady[n-1], msg) {
					notReady = append(notReady, fmt.Sprintf("  +%s %s", time.Since(t0).Round(100*time.Millisecond), msg))
				}
			}
			return false, msg
		}
		if !reported {
			return false, fmt.Sprintf("no failover reported since %s: %+v", t0.Format(time.RFC3339), cur.Status.Leader)
		}
		run.failover = *cur.Status.Leader.LastFailover
		return true, ""
	})
	run.b = bAt.Sub(t0)
	if run.b > run.seen+5*time.Second {
		t.Logf("the backend was Ready with full capacity %s after it reported the failover; its status meanwhile:\n%s",
			(run.b - run.seen).Round(10*time.Millisecond), strings.Join(notReady, "\n"))
	}

	// (c) The probe's first good put after the failover (after a failed one, or, when none
	// failed, once the new master served), at the time the engine wrote it.
	firstGood := func() (time.Time, string) {
		lines, err := engineLines(ctx, bindingNS, ww.probe.name, "server", t0)
		if err != nil {
			return time.Time{}, err.Error()
		}
		failed := false
		for _, l := range lines {
			if !l.ok() {
				failed = true
				continue
			}
			if failed || !l.at.Before(aAt) {
				return l.at, ""
			}
		}
		return time.Time{}, fmt.Sprintf("%d rounds since, none good after the failover", len(lines))
	}
	var cAt time.Time
	eventually(t, 2*time.Minute, 200*time.Millisecond, "the probe's next put succeeding", func() (bool, string) {
		at, msg := firstGood()
		cAt = at
		return !at.IsZero(), msg
	})
	run.c = cAt.Sub(t0)
	if run.c > run.a+5*time.Second {
		t.Logf("the probe's first good put came %s after the new master served; its failed rounds since the failover:\n%s\nthe leader Service's endpoints as they changed:\n%s",
			(run.c - run.a).Round(10*time.Millisecond), failedRounds(ctx, ww.probe.name, t0), strings.Join(routes(), "\n"))
	}

	// What the probe put, read back.
	run.probe = ww.probe.mustRead(t)
	eventually(t, 30*time.Second, 500*time.Millisecond, "a WarmFailover event for this failover", func() (bool, string) {
		notes := eventsSince(ctx, t, warmBackend, "WarmFailover", t0)
		return len(notes) > 0, "none since " + t0.Format(time.RFC3339)
	})
	if s, err := ww.servingPod(ctx); err == nil {
		run.to = s.Name
	}
	return run
}

// memberDuringFailover deletes the serving leader Pod and a member Pod at once. The member
// drains before it stops (its preStop moves its objects to the other member through the leader
// Service, which is itself failing over): no read returns another key's bytes, and every object
// the other member held is kept.
func (ww *warmWalk) memberDuringFailover(t *testing.T) {
	ctx := context.Background()
	ww.waitSteady(t, ww.probe.name)
	victim, most, others := ww.busiestMember(t)
	t.Logf("deleting %s on %s with the serving leader Pod", victim.Name, victim.Spec.NodeName)
	lostBefore := lostObjects(getBackend(t, warmBackend))
	// The member's preStop drain writes its lines to the member's log, which goes with the Pod:
	// they are read as they come.
	drainLog := followLog(t, systemNS, victim.Name, victim.Spec.Containers[0].Name, "drain")

	r := ww.failoverRun(t, false, func() {
		require.NoError(t, env.client.CoreV1().Pods(systemNS).Delete(ctx, victim.Name, metav1.DeleteOptions{}))
	})
	// The member is replaced: a new Pod on its node, registered, the store at full capacity.
	replaced := eventually(t, 6*time.Minute, time.Second, "the deleted member replaced and the store Ready with full capacity", func() (bool, string) {
		now := memberPodsByNode(t, warmBackend)
		p, ok := now[victim.Spec.NodeName]
		if !ok || p.UID == victim.UID || !podCondition(&p, corev1.PodReady) {
			return false, fmt.Sprintf("member on %s: %v", victim.Spec.NodeName, ok)
		}
		return backendReady(getBackend(t, warmBackend), ww.full)
	})
	pr := ww.probe.mustRead(t)
	b := getBackend(t, warmBackend)
	lines := drainLog()
	t.Logf("the deleted member's drain, as it logged it:\n%s", strings.Join(lines, "\n"))
	record(t, "warm, the serving leader Pod and member %s (holding %d of the probe's objects, the other member %d) deleted together: (a) a new master after %s, (b) Ready with lastFailover %s kept %d lost %d after %s, (c) the probe's next put after %s, the member replaced and the store at full capacity after %s; the member's drain: %s; probe objects kept %d, missing %d, wrong %d of %d; store lost %d objects",
		victim.Name, most, others, r.a.Round(10*time.Millisecond), r.failover.Mode, r.failover.Kept, r.failover.Lost, r.b.Round(10*time.Millisecond),
		r.c.Round(10*time.Millisecond), replaced.Sub(r.t0).Round(time.Second), drainOutcome(lines), pr.Kept, pr.Missing, pr.Wrong, pr.Written, lostObjects(b)-lostBefore)
	assert.Zero(t, pr.Wrong, "no read returned another key's bytes: %+v", pr)
	assert.GreaterOrEqual(t, pr.Kept, others, "every probe object the other member held is kept: %+v", pr)
	assert.Equal(t, pr.Written, pr.Kept+pr.Missing, "every probe object is kept or missing: %+v", pr)
}

// busiestMember is the member holding the most of the probe's objects, how many it holds, and
// how many the others hold.
func (ww *warmWalk) busiestMember(t *testing.T) (victim corev1.Pod, most, others int) {
	t.Helper()
	members := memberPodsByNode(t, warmBackend)
	require.Len(t, members, len(env.sockets))
	where := probeObjectsByMember(t, members)
	most = -1
	for _, m := range members {
		if where[m.Name] > most {
			victim, most = m, where[m.Name]
		}
	}
	for name, n := range where {
		if name != victim.Name {
			others += n
		}
	}
	t.Logf("probe objects by member: %v", where)
	return victim, most, others
}

// memberKilledDuringFailover kills the serving master and a member's process at once. The
// member starts again in its Pod under a new segment name and never mounts the old one on the
// new master, which still indexes the objects it held: no read returns another key's bytes,
// every object the other member held is kept, and once the members' minute to mount again has
// passed the operator counts the dead member's objects lost, out of the failover's kept count.
func (ww *warmWalk) memberKilledDuringFailover(t *testing.T) {
	ww.waitSteady(t, ww.probe.name)
	victim, most, others := ww.busiestMember(t)
	lostBefore := lostObjects(getBackend(t, warmBackend))
	r := ww.failoverRun(t, true, func() { killContainer(t, &victim) })
	var b *kvv1.KVCacheBackend
	counted := eventually(t, 3*time.Minute, time.Second, "the dead member's objects counted lost", func() (bool, string) {
		b = getBackend(t, warmBackend)
		f := b.Status.Leader.LastFailover
		return lostObjects(b) > lostBefore && f != nil && f.Lost > 0, fmt.Sprintf("lastFailover %+v, lost %+v", f, b.Status.Lost)
	})
	pr := ww.probe.mustRead(t)
	f := b.Status.Leader.LastFailover
	record(t, "warm, the serving master and member %s (holding %d of the probe's objects, the other member %d) killed together: (a) a new master after %s, (c) the probe's next put after %s; counted lost %s after the kill: lastFailover kept %d lost %d, status.lost +%d (%s, %s); probe objects kept %d, missing %d, wrong %d of %d",
		victim.Name, most, others, r.a.Round(10*time.Millisecond), r.c.Round(10*time.Millisecond), counted.Sub(r.t0).Round(time.Second),
		f.Kept, f.Lost, lostObjects(b)-lostBefore, b.Status.Lost.Last.Cause, b.Status.Lost.Last.Member, pr.Kept, pr.Missing, pr.Wrong, pr.Written)
	assert.Zero(t, pr.Wrong, "no read returned another key's bytes: %+v", pr)
	assert.GreaterOrEqual(t, pr.Kept, others, "every probe object the other member held is kept: %+v", pr)
	assert.Positive(t, pr.Missing, "the dead member's objects miss: %+v", pr)
	assert.Equal(t, kvv1.LossMemberLost, b.Status.Lost.Last.Cause)
	assert.GreaterOrEqual(t, f.Lost, int64(pr.Missing)/2, "the estimate counts about what misses: %+v, %+v", f, pr)
}

// teardown deletes what the test applied as a user does, the store before its etcd, and
// uninstalls the release; nothing of either may be left.
func (ww *warmWalk) teardown(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, deletePod(ctx, bindingNS, warmProbe, 0))
	t0 := time.Now()
	kubectl(t, ww.store, "delete", "-f", "-", "--wait=true", "--timeout=3m")
	eventually(t, 2*time.Minute, 250*time.Millisecond, "no store Pod, no engine Pod, nothing a backend owns", func() (bool, string) {
		return nothingLeft(ctx, t, vocab.LabelName+"!="+warmEtcd)
	})
	for _, l := range []client.ObjectList{&kvv1.KVCacheBackendList{}, &kvv1.KVCachePoolList{}, &kvv1.KVCachePoolBindingList{}} {
		require.NoError(t, env.kube.List(ctx, l))
		assert.Zero(t, meta.LenList(l), "%T empty", l)
	}
	store := time.Since(t0)
	kubectl(t, ww.etcd, "delete", "-f", "-", "--wait=true", "--timeout=2m")
	eventually(t, 2*time.Minute, 250*time.Millisecond, "no Pod left in "+systemNS, func() (bool, string) {
		l, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d Pods", len(l.Items))
	})
	ww.manifests = nil
	out := helm(t, "uninstall", release, "--namespace", releaseNS, "--wait")
	assert.Contains(t, out, "uninstalled")
	uninstalled(t)
	record(t, "warm: kubectl delete of the warm store: nothing of it left after %s; the etcd deleted and the release uninstalled after %s",
		store.Round(100*time.Millisecond), time.Since(t0).Round(100*time.Millisecond))
}

// waitSteady waits for the warm store's steady state: every leader Pod's master running (none
// going), exactly one ready (the serving master), the backend Ready with full capacity, and
// the probe's latest round good (when a probe is named). It returns the serving leader Pod.
func (ww *warmWalk) waitSteady(t *testing.T, probeName string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var serving *corev1.Pod
	eventually(t, 3*time.Minute, 250*time.Millisecond, fmt.Sprintf("the warm store steady: %d leader Pods running, 1 ready, Ready with full capacity", warmLeaders), func() (bool, string) {
		var msg string
		serving, msg = leadersSteady(ctx, t, warmBackend, warmLeaders, ww.full, probeName)
		return serving != nil, msg
	})
	return serving
}

func warmLeaderPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{
		LabelSelector: vocab.LabelInstance + "=" + warmBackend + "," + vocab.LabelComponent + "=leader"})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// servingPod is the ready leader Pod: only the serving master is ready.
func (ww *warmWalk) servingPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := warmLeaderPods(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podCondition(&p, corev1.PodReady) {
			return &p, nil
		}
	}
	return nil, fmt.Errorf("no ready leader Pod")
}

// drainOutcome is what drain-member's final line says: its result, how long it took and what
// moved.
func drainOutcome(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		_, rest, _ := strings.Cut(lines[i], " ")
		var done struct {
			Msg      string `json:"msg"`
			Result   string `json:"result"`
			Elapsed  string `json:"elapsed"`
			Units    int    `json:"succeeded_units"`
			Migrated int64  `json:"migrated_bytes"`
		}
		if json.Unmarshal([]byte(rest), &done) == nil && done.Msg == "drain-done" {
			return fmt.Sprintf("%s after %s (%d objects, %d bytes moved)", done.Result, done.Elapsed, done.Units, done.Migrated)
		}
	}
	return "no drain-done line read"
}

// followLog reads a container's log every second from now until the Pod is gone or the test
// ends, keeping the lines that contain word; the function returned gives the lines kept so far.
func followLog(t *testing.T, ns, pod, container, word string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var lines []string
	done := make(chan struct{})
	st := metav1.NewTime(time.Now().Add(-time.Second))
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			raw, err := env.client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true, SinceTime: &st}).DoRaw(ctx)
			if err != nil {
				if _, gone := env.client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); gone != nil {
					return
				}
			} else {
				var kept []string
				for _, l := range strings.Split(string(raw), "\n") {
					if strings.Contains(l, word) {
						kept = append(kept, l)
					}
				}
				mu.Lock()
				lines = kept
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// watchEndpoints reads a Service's EndpointSlices in the system namespace every 100 ms until
// stopped; changes gives each change: the time, and each endpoint's address with its ready,
// serving and terminating conditions.
func watchEndpoints(service string) (changes func() []string, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for ctx.Err() == nil {
			l, err := env.client.DiscoveryV1().EndpointSlices(systemNS).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
			if err == nil {
				var eps []string
				for _, s := range l.Items {
					for _, e := range s.Endpoints {
						c := e.Conditions
						flag := func(b *bool) bool { return b != nil && *b }
						eps = append(eps, fmt.Sprintf("%s ready=%v serving=%v terminating=%v", strings.Join(e.Addresses, ","), flag(c.Ready), flag(c.Serving), flag(c.Terminating)))
					}
				}
				slices.Sort(eps)
				if now := strings.Join(eps, "; "); now != last {
					mu.Lock()
					seen = append(seen, "  "+time.Now().UTC().Format("15:04:05.000")+" "+now)
					mu.Unlock()
					last = now
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(seen)
		}, func() {
			cancel()
			<-done
		}
}

// failedRounds are a stand-in's failed rounds since t0 and the client's error lines, with
// their times.
func failedRounds(ctx context.Context, pod string, t0 time.Time) string {
	st := metav1.NewTime(t0.Add(-time.Second))
	raw, err := env.client.CoreV1().Pods(bindingNS).GetLogs(pod, &corev1.PodLogOptions{Container: "server", Timestamps: true, SinceTime: &st}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, l := range strings.Split(string(raw), "\n") {
		ts, rest, _ := strings.Cut(l, " ")
		var round struct {
			Round int  `json:"round"`
			OK    bool `json:"ok"`
			Put   int  `json:"put"`
		}
		switch {
		case json.Unmarshal([]byte(rest), &round) == nil && round.Round > 0:
			if !round.OK {
				fmt.Fprintf(&b, "  %s round %d failed: put %d\n", ts, round.Round, round.Put)
			}
		case strings.HasPrefix(rest, "E") || strings.HasPrefix(rest, "W"):
			fmt.Fprintf(&b, "  %s %s\n", ts, rest)
		}
	}
	return b.String()
}

// warmPodsSummary says what the warm store's Pods are doing, for a message.
func warmPodsSummary(t *testing.T) string {
	t.Helper()
	l, err := env.client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{LabelSelector: vocab.LabelInstance + "=" + warmBackend})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range l.Items {
		state := string(p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				state += fmt.Sprintf(" %s:%s", c.Name, c.State.Waiting.Reason)
			case c.State.Terminated != nil:
				state += fmt.Sprintf(" %s:exited %d", c.Name, c.State.Terminated.ExitCode)
			}
			if c.RestartCount > 0 {
				state += fmt.Sprintf(" restarts=%d", c.RestartCount)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s ready=%v", p.Name, state, podCondition(&p, corev1.PodReady)))
	}
	return strings.Join(parts, ", ")
}

// probeObjectsByMember counts the probe's objects by the member Pod that holds them, from the
// serving master's /query_key (a segment is named <member Pod IP>:<port>).
func probeObjectsByMember(t *testing.T, members map[string]corev1.Pod) map[string]int {
	t.Helper()
	ctx := context.Background()
	base, err := adminBase(ctx)
	require.NoError(t, err)
	out := map[string]int{}
	for i := 0; i < probeObjects; i++ {
		body, err := getBody(ctx, base+"/query_key?key=kvcache-probe/"+fmt.Sprint(i))
		require.NoError(t, err)
		found := false
		for _, m := range members {
			if strings.Contains(body, m.Status.PodIP+":") {
				out[m.Name]++
				found = true
			}
		}
		require.True(t, found, "no member named in /query_key of kvcache-probe/%d: %s", i, body)
	}
	return out
}

// masterReading is what the serving master (through the leader Service) says of itself.
type masterReading struct {
	ServiceReady bool            `json:"service_ready"`
	Role         string          `json:"role"`
	HAState      string          `json:"ha_state"`
	Leader       json.RawMessage `json:"leader_address"`
	View         json.RawMessage `json:"view_version"`
	counters     float64
	keys         int64
}

// newerThan reports whether r is read from another master process than before: its view of the
// election moved, or its counters (which only grow in one process) started over.
func (r masterReading) newerThan(before masterReading) bool {
	known := func(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }
	if known(r.View) && known(before.View) && string(r.View) != string(before.View) {
		return true
	}
	return r.counters < before.counters
}

func readMaster(ctx context.Context) (masterReading, error) {
	var r masterReading
	base, err := adminBase(ctx)
	if err != nil {
		return r, err
	}
	body, err := getBody(ctx, base+"/health")
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return r, fmt.Errorf("/health: %w: %s", err, body)
	}
	admin, err := storeAdmin(ctx, warmBackend)
	if err != nil {
		return r, err
	}
	m, err := admin.Metrics(ctx)
	if err != nil {
		return r, err
	}
	r.counters, r.keys = m.CounterSum, m.KeyCount
	return r, nil
}

// adminBase is the warm store's admin API through its leader Service's ClusterIP.
func adminBase(ctx context.Context) (string, error) {
	svc, err := env.client.CoreV1().Services(systemNS).Get(ctx, warmBackend+"-leader", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, adminPort), nil
}

// getBody GETs url on a new connection (a master answers 404 on a connection it accepted while
// it was starting) and returns a 200's body.
func getBody(ctx context.Context, url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	return string(b), nil
}

// failoverColumn is the FAILOVER column of `kubectl get kvcb <warm> -o wide`.
func failoverColumn(t *testing.T) string {
	t.Helper()
	out := kubectl(t, nil, "get", "kvcb", warmBackend, "-o", "wide")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "%s", out)
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	i := slices.Index(header, "FAILOVER")
	require.GreaterOrEqual(t, i, 0, "no FAILOVER column: %s", out)
	require.Greater(t, len(row), i, "%s", out)
	return row[i]
}

func clientEndpoint(b *kvv1.KVCacheBackend) string {
	for _, e := range b.Status.Endpoints {
		if e.Name == kvv1.EndpointClient {
			return e.Address
		}
	}
	return ""
}

// conditionMessage is a backend condition's status and message.
func conditionMessage(b *kvv1.KVCacheBackend, t string) string {
	c := condition(b.Status.Conditions, t)
	if c == nil {
		return "(none)"
	}
	return fmt.Sprintf("%s %s", c.Status, c.Message)
}

// storeDefaults are the renderer's defaults (the store's ports).
func storeDefaults(t *testing.T) values.Defaults {
	t.Helper()
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	return r.Defaults()
}

// eventsSince are the notes of the Events about the backend name with reason, last seen at or after t0.
func eventsSince(ctx context.Context, t *testing.T, name, reason string, t0 time.Time) []string {
	t.Helper()
	l, err := env.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + name})
	require.NoError(t, err)
	var out []string
	from := t0.Truncate(time.Second)
	for _, e := range l.Items {
		last := e.LastTimestamp.Time
		if e.EventTime.After(last) {
			last = e.EventTime.Time
		}
		if e.Series != nil && e.Series.LastObservedTime.After(last) {
			last = e.Series.LastObservedTime.Time
		}
		if !last.Before(from) {
			out = append(out, e.Message)
		}
	}
	return out
}

// warmLogsSince is logsSince for the warm store and its probe, and the etcd's last lines.
func warmLogsSince(ctx context.Context, t time.Time, probeName string) string {
	var b strings.Builder
	b.WriteString(logsSince(ctx, t, probeName, warmBackend))
	st := metav1.NewTime(t.Add(-time.Second))
	if l, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelName + "=" + warmEtcd}); err == nil {
		for _, p := range l.Items {
			raw, _ := env.client.CoreV1().Pods(systemNS).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st, TailLines: ptr(int64(20))}).DoRaw(ctx)
			fmt.Fprintf(&b, "--- %s/%s (last 20 lines)\n%s\n", systemNS, p.Name, strings.TrimRight(string(raw), "\n"))
		}
	}
	return b.String()
}
