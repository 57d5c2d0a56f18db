package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/vocab"
)

// probeObjects is how many objects a probe puts; each is 64 KiB, bytes derived from its key.
const probeObjects = 60

// probe is an injected stand-in engine that put probeObjects objects once and reads them all
// back on GET /probe, comparing every byte with the key's own.
type probe struct {
	name string
	ip   string
}

// probeResult is what GET /probe answers.
type probeResult struct {
	Objects int `json:"objects"`
	Written int `json:"written"`
	Kept    int `json:"kept"`
	Missing int `json:"missing"`
	Wrong   int `json:"wrong"`
}

// startProbe creates a probe in the Binding's namespace (on node, when one is named) and waits
// until it has put its objects.
func startProbe(t *testing.T, name, node string) *probe {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, deletePod(ctx, bindingNS, name, 0))
	eventually(t, time.Minute, 250*time.Millisecond, "the previous "+name+" gone", func() (bool, string) {
		_, err := env.client.CoreV1().Pods(bindingNS).Get(ctx, name, metav1.GetOptions{})
		return err != nil, "still there"
	})
	p := labelledPod(name, bindingName, "5")
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PROBE_OBJECTS", Value: fmt.Sprint(probeObjects)},
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PROBE_BYTES", Value: "65536"})
	if node != "" {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	_, err := createPod(ctx, p, false)
	require.NoError(t, err)
	t.Cleanup(func() { _ = deletePod(context.Background(), bindingNS, name, 0) })
	ready := waitPodReadyIn(t, bindingNS, name, 2*time.Minute)
	pr := &probe{name: name, ip: ready.Status.PodIP}
	eventually(t, time.Minute, 500*time.Millisecond, "the probe's objects written", func() (bool, string) {
		r, err := pr.read()
		if err != nil {
			return false, err.Error()
		}
		return r.Written == probeObjects && r.Kept == probeObjects, fmt.Sprintf("%+v", r)
	})
	return pr
}

func (p *probe) read() (probeResult, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + p.ip + ":8000/probe")
	if err != nil {
		return probeResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return probeResult{}, err
	}
	var r probeResult
	return r, json.Unmarshal(b, &r)
}

func (p *probe) mustRead(t *testing.T) probeResult {
	t.Helper()
	r, err := p.read()
	require.NoError(t, err)
	assert.Zero(t, r.Wrong, "a read returned another key's bytes")
	return r
}

// storePods are the store's Pods by name, with their UIDs and restart counts: a Pod replaced
// or restarted shows as a different entry.
func storePods(t *testing.T) map[string]string {
	t.Helper()
	l, err := env.client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: vocab.LabelName + "=" + vocab.StoreName + "," + vocab.LabelInstance + "=" + backendName})
	require.NoError(t, err)
	out := map[string]string{}
	for _, p := range l.Items {
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		restarts := int32(0)
		for _, c := range p.Status.ContainerStatuses {
			restarts += c.RestartCount
		}
		out[p.Name] = fmt.Sprintf("%s restarts=%d", p.UID, restarts)
	}
	return out
}

// tagOperatorImage gives the loaded operator image another tag on every node, as a patch release
// of the same build would be published.
func tagOperatorImage(t *testing.T, tag string) string {
	t.Helper()
	src := env.images["operator"]
	repo := src[:strings.LastIndex(src, ":")]
	dst := repo + ":" + tag
	for _, sock := range env.sockets {
		out, err := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "tag", "--force", src, dst).CombinedOutput()
		require.NoError(t, err, "ctr images tag %s %s: %s", src, dst, out)
	}
	return dst
}

// operatorUpgrade is `helm upgrade` to another tag of the same build (any patch release): the
// managers roll, and no store Pod is replaced or restarted; every probe object reads back; the
// backend says an update waits, naming the launcher image it would change.
func (w *walk) operatorUpgrade(t *testing.T) {
	pr := startProbe(t, "probe-upgrade", "")
	before := storePods(t)
	src := env.images["operator"]
	tag := src[strings.LastIndex(src, ":")+1:] + "-e2e-upgrade"
	tagOperatorImage(t, tag)
	t0 := time.Now()
	helm(t, "upgrade", release, "charts/kvcache-operator", "--namespace", releaseNS, "--reuse-values", "--set", "image.tag="+tag, "--wait", "--timeout", "3m")
	kubectl(t, nil, "-n", releaseNS, "rollout", "status", "deployment/"+fullname, "--timeout=3m")
	for _, p := range managerPods(t) {
		require.True(t, strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag), "manager %s runs the new tag", p.Name)
	}
	// The new managers have reconciled the backend when they report what waits.
	var pending string
	eventually(t, 2*time.Minute, 500*time.Millisecond, "the backend reports the deferred update", func() (bool, string) {
		b := getBackend(t, backendName)
		c := condition(b.Status.Conditions, kvv1.ConditionUpdatePending)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("%+v", c)
		}
		pending = c.Message
		return true, ""
	})
	assert.Contains(t, pending, ":"+tag, "the pending update names the new launcher image")
	time.Sleep(5 * time.Second) // a few more reconciles of the new managers
	assert.Equal(t, before, storePods(t), "no store Pod was replaced or restarted by the operator's upgrade")
	r := pr.mustRead(t)
	assert.Equal(t, probeObjects, r.Kept, "every object cached before the upgrade reads back after it: %+v", r)
	record(t, "helm upgrade of the operator to another tag: %s; store Pods replaced: 0 of %d; probe objects kept %d/%d, wrong %d; pending: %s",
		time.Since(t0).Round(100*time.Millisecond), len(before), r.Kept, probeObjects, r.Wrong, pending)
	out := kubectl(t, nil, "get", "kvcb", backendName, "-o", "wide")
	assert.Contains(t, out, "UPDATE-PENDING")
}

// leaderChange changes the leader's Pod template with 3 replicas (a master flag): admission
// says it restarts the master; the standbys are replaced first, then the serving leader hands
// over once, gracefully; the outage (the engine's failing puts) is measured. The master that
// takes over starts empty, so the probe's objects miss, and none reads back wrong.
func (w *walk) leaderChange(t *testing.T) {
	ctx := context.Background()
	pr := startProbe(t, "probe-leader", "")
	const engine = "engine-rollout"
	_ = deletePod(ctx, bindingNS, engine, 0)
	_, err := createPod(ctx, labelledPod(engine, bindingName, "0.2"), false)
	require.NoError(t, err)
	t.Cleanup(func() { _ = deletePod(context.Background(), bindingNS, engine, 0) })
	waitPodReadyIn(t, bindingNS, engine, 2*time.Minute)
	old := w.waitSteadyHA(t, engine)
	lease := func() (string, int32) {
		l, err := env.client.CoordinationV1().Leases(systemNS).Get(ctx, backendName+"-leader", metav1.GetOptions{})
		require.NoError(t, err)
		var tr int32
		if l.Spec.LeaseTransitions != nil {
			tr = *l.Spec.LeaseTransitions
		}
		return *l.Spec.HolderIdentity, tr
	}
	_, transitionsBefore := lease()
	t0 := time.Now()
	out := kubectl(t, nil, "patch", "kvcb", backendName, "--type=merge", "-p", `{"spec":{"connection":{"managed":{"leader":{"extraArgs":["-default_kv_lease_ttl=5s"]}}}}}`)
	assert.Contains(t, out, "hands over once, gracefully", "kubectl shows the admission warning: %s", out)
	var holder string
	eventually(t, 4*time.Minute, 500*time.Millisecond, "every leader Pod on the new template, one of them leading", func() (bool, string) {
		l, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelInstance + "=" + backendName + "," + vocab.LabelComponent + "=leader"})
		if err != nil {
			return false, err.Error()
		}
		var args []string
		serving := 0
		for _, p := range l.Items {
			if !p.DeletionTimestamp.IsZero() {
				return false, p.Name + " terminating"
			}
			if !strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "-default_kv_lease_ttl=5s") {
				args = append(args, p.Name)
			}
			if p.Labels[vocab.LabelStoreLeader] == "true" && podCondition(&p, corev1.PodReady) {
				serving++
				holder = p.Name
			}
		}
		sort.Strings(args)
		return len(l.Items) == 3 && len(args) == 0 && serving == 1, fmt.Sprintf("%d Pods, on the old template: %v, serving %d", len(l.Items), args, serving)
	})
	rolled := time.Since(t0)
	_, transitions := lease()
	assert.Equal(t, transitionsBefore+1, transitions, "exactly one handover (the Lease moved once)")
	assert.NotEqual(t, old.Name, holder)
	// The outage the engine saw: its failed rounds since the change.
	lines, err := engineLines(ctx, bindingNS, engine, "server", t0)
	require.NoError(t, err)
	var firstFail, lastFail time.Time
	for _, l := range lines {
		if !l.ok() {
			if firstFail.IsZero() {
				firstFail = l.at
			}
			lastFail = l.at
		}
	}
	outage := time.Duration(0)
	if !firstFail.IsZero() {
		outage = lastFail.Sub(firstFail) + time.Second // one round period past the last failure
	}
	r := pr.mustRead(t)
	record(t, "leader Pod template changed at 3 replicas: rolled in %s with one handover (Lease transitions %d -> %d); the engine's puts failed for ~%s; probe objects after the cold master: kept %d/%d, wrong %d",
		rolled.Round(100*time.Millisecond), transitionsBefore, transitions, outage.Round(100*time.Millisecond), r.Kept, probeObjects, r.Wrong)
	assert.LessOrEqual(t, outage, 15*time.Second, "one graceful handover, not an outage")
	b := getBackend(t, backendName)
	eventually(t, time.Minute, 500*time.Millisecond, "the backend Ready after the handover", func() (bool, string) {
		b = getBackend(t, backendName)
		return backendReady(b, w.full)
	})
	require.NoError(t, env.kube.Get(ctx, client.ObjectKeyFromObject(b), b))
}

// memberPodsByNode are a store's member Pods that are not stopping, by node.
func memberPodsByNode(t *testing.T, backend string) map[string]corev1.Pod {
	t.Helper()
	l, err := env.client.CoreV1().Pods(systemNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: vocab.LabelInstance + "=" + backend + "," + vocab.LabelComponent + "=" + vocab.MemberComponentPrefix + "0"})
	require.NoError(t, err)
	out := map[string]corev1.Pod{}
	for _, p := range l.Items {
		if p.DeletionTimestamp.IsZero() {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

func lostObjects(b *kvv1.KVCacheBackend) int64 {
	if b.Status.Lost == nil {
		return 0
	}
	return b.Status.Lost.Objects
}

// memberChange changes the member group's Pod template (an extraEnv entry): admission says the
// members are replaced, draining first; every member is replaced, one at a time, each after the
// master moved its objects to the other; every probe object reads back, none wrong, and the
// store counts no loss. The master runs with leaderChange's 5 s lease: the probe's read-back
// leases its objects, and a drain waits for a lease to end before it moves the object.
func (w *walk) memberChange(t *testing.T) {
	ctx := context.Background()
	pr := startProbe(t, "probe-members", "")
	before := memberPodsByNode(t, backendName)
	require.Len(t, before, 2, "a member on each node")
	lostBefore := lostObjects(getBackend(t, backendName))
	t0 := time.Now()
	defer func() {
		if t.Failed() {
			t.Logf("the backend's events and the managers' log lines about members since the change:\n%s", diagnoseBackend(ctx, backendName, t0, "drain", "member", "error"))
		}
	}()
	out := kubectl(t, nil, "patch", "kvcb", backendName, "--type=json", "-p",
		`[{"op":"add","path":"/spec/connection/managed/members/0/extraEnv","value":[{"name":"KVCACHE_E2E_MEMBER_CHANGE","value":"1"}]}]`)
	assert.Contains(t, out, "replaces the members of group 0", "kubectl shows the admission warning: %s", out)
	drained := map[string]bool{}
	eventually(t, 6*time.Minute, time.Second, "every member replaced, one at a time, and registered again", func() (bool, string) {
		b := getBackend(t, backendName)
		for _, d := range b.Status.Drains {
			drained[d.Pod] = true
		}
		now := memberPodsByNode(t, backendName)
		replaced := 0
		for node, p := range now {
			if old, ok := before[node]; ok && old.UID != p.UID {
				replaced++
			}
		}
		ok, msg := backendReady(b, w.full)
		return replaced == len(before) && ok, fmt.Sprintf("%d of %d replaced; %s; drains %v", replaced, len(before), msg, b.Status.Drains)
	})
	took := time.Since(t0)
	assert.Len(t, drained, 2, "each replaced member was drained first (status.drains named it): %v", drained)
	r := pr.mustRead(t)
	assert.Equal(t, probeObjects, r.Kept, "every object reads back after every member was replaced: %+v", r)
	assert.Equal(t, lostBefore, lostObjects(getBackend(t, backendName)), "the store counted no loss")
	notes := objectEvents(ctx, t, "", backendName, "MemberDrained")
	record(t, "member group Pod template changed: both members replaced one at a time, each drained first, in %s; probe objects kept %d/%d, wrong %d; %s",
		took.Round(time.Second), r.Kept, probeObjects, r.Wrong, strings.Join(notes, "; "))
}

// nodeDrain is `kubectl drain` of the node that runs neither the serving master nor the probe
// (draining the serving master's node is a failover, and the master that takes over starts
// empty): the operator drains that node's member when the node is cordoned; the member then
// stops (as the node's maintenance would stop it) and every probe object still reads back, none
// wrong.
func (w *walk) nodeDrain(t *testing.T) {
	ctx := context.Background()
	serving := w.waitSteadyHA(t, "")
	pr := startProbe(t, "probe-drain", serving.Spec.NodeName)
	members := memberPodsByNode(t, backendName)
	var node string
	for n := range members {
		if n != serving.Spec.NodeName {
			node = n
		}
	}
	require.NotEmpty(t, node, "a node without the serving master: %v", members)
	lostBefore := lostObjects(getBackend(t, backendName))
	t0 := time.Now()
	kubectl(t, nil, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=3m")
	t.Cleanup(func() { _, _ = kubectlOut(context.Background(), nil, "uncordon", node) })
	var drainedAt time.Duration
	eventually(t, 5*time.Minute, time.Second, "the cordoned node's member drained", func() (bool, string) {
		b := getBackend(t, backendName)
		for _, m := range b.Status.Members {
			if m.Node == node {
				return m.Status == "DRAINED" && len(b.Status.Drains) == 0, fmt.Sprintf("member on %s: %s; drains %v", node, m.Status, b.Status.Drains)
			}
		}
		return false, "no member on " + node
	})
	drainedAt = time.Since(t0)
	// The node's maintenance stops its member: its objects are elsewhere by now.
	victim := members[node]
	require.NoError(t, deletePod(ctx, systemNS, victim.Name, 30))
	eventually(t, 2*time.Minute, time.Second, "the member stopped", func() (bool, string) {
		_, err := env.client.CoreV1().Pods(systemNS).Get(ctx, victim.Name, metav1.GetOptions{})
		return err != nil, "still there"
	})
	r := pr.mustRead(t)
	assert.Equal(t, probeObjects, r.Kept, "every object reads back after the drained node's member stopped: %+v", r)
	assert.Equal(t, lostBefore, lostObjects(getBackend(t, backendName)), "the store counted no loss")
	kubectl(t, nil, "uncordon", node)
	eventually(t, 3*time.Minute, time.Second, "the store Ready with full capacity again", func() (bool, string) {
		return backendReady(getBackend(t, backendName), w.full)
	})
	record(t, "kubectl drain of %s: its member drained in %s (cordon to DRAINED), then stopped; probe objects kept %d/%d, wrong %d", node, drainedAt.Round(time.Second), r.Kept, probeObjects, r.Wrong)
}
