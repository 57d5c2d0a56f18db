package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The fault kinds, as the report names them.
const (
	faultLeaderDelete = "leader Pod deleted"
	faultMasterKill   = "serving master SIGKILLed"
	faultManagerKill  = "manager leader replica SIGKILLed"
	faultManagersDown = "both manager replicas down 30s"
	faultNodeOff      = "node off 60s (kubelet, containerd, its Pods)"
	faultAPIServer    = "kube-apiserver restarted"
	faultContainerd   = "containerd restarted"
)

// fault acts on the cluster (n counts its runs, to alternate nodes), records in w which
// containers of ours it may restart, and returns once its own duration is over.
type fault struct {
	kind string
	act  func(s *soak, w *window, n int) error
}

func (s *soak) faults() []fault {
	return []fault{
		{faultManagerKill, (*soak).killManagerLeader},
		{faultLeaderDelete, (*soak).deleteLeaderPod},
		{faultMasterKill, (*soak).killMaster},
		{faultContainerd, (*soak).restartContainerd},
		{faultAPIServer, (*soak).restartAPIServer},
		{faultManagersDown, (*soak).managersDown},
		{faultNodeOff, (*soak).nodeOff},
	}
}

// schedule runs every fault kind once in turn (even past the deadline: make test's short run
// sees each kind), then, while time remains, overlapping pairs and single faults in turn, with
// a quiet stretch between them in which nothing may fail: 20 s in a run of 20 minutes or more,
// 10 s in make test's short one (the stand-ins write every second, so a failure outside a
// fault still shows ten times over).
func (s *soak) schedule(deadline time.Time) {
	all := s.faults()
	byKind := map[string]fault{}
	for _, f := range all {
		byKind[f.kind] = f
	}
	pairs := [][2]string{
		{faultNodeOff, faultMasterKill},
		{faultAPIServer, faultManagerKill},
		{faultContainerd, faultLeaderDelete},
		{faultManagersDown, faultMasterKill},
		{faultNodeOff, faultAPIServer},
	}
	runs := map[string]int{}
	quiet := 20 * time.Second
	if s.cfg.duration < 20*time.Minute {
		quiet = 10 * time.Second
	}
	for _, f := range all {
		s.runFaults(runs, f)
		if !s.sleep(quiet) {
			return
		}
	}
	for n := 0; time.Now().Before(deadline); n++ {
		if n%2 == 0 {
			p := pairs[(n/2)%len(pairs)]
			s.runFaults(runs, byKind[p[0]], byKind[p[1]])
		} else {
			s.runFaults(runs, all[(n/2)%len(all)])
		}
		if !s.sleep(quiet) {
			return
		}
	}
}

// runFaults runs the faults together (each after the one before by 5 s) as one window, then
// waits for the store to settle.
func (s *soak) runFaults(runs map[string]int, fs ...fault) {
	kinds := make([]string, len(fs))
	for i, f := range fs {
		kinds[i] = f.kind
	}
	w := &window{kind: strings.Join(kinds, " + "), start: time.Now()}
	s.mu.Lock()
	s.windows = append(s.windows, w)
	s.mu.Unlock()
	s.event("fault", map[string]any{"kind": w.kind})
	cold := s.coldSince()
	watch := s.watchCapacity(w)
	var wg sync.WaitGroup
	for i, f := range fs {
		n := runs[f.kind]
		runs[f.kind]++
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Second)
			if err := f.act(s, w, n); err != nil {
				s.breach("fault", "%s could not be carried out: %v", f.kind, err)
			}
		}()
	}
	wg.Wait()
	ok, msg := s.settle(5 * time.Minute)
	if !ok {
		s.breach("3 settle", "%s: not settled 5 minutes after the fault: %s", w.kind, msg)
	}
	capacity := watch()
	s.mu.Lock()
	w.end = time.Now()
	w.capacity = capacity
	w.lostBytes = !s.coldSince().Equal(cold)
	s.mu.Unlock()
	w.kept = s.readProbe(w)
	// (With no probe, an earlier breach kept it from being made again: that breach is the finding.)
	if sparesTheStore(kinds) && w.kept != noProbe && w.kept != fmt.Sprintf("%d/%d", probeObjects, probeObjects) {
		s.breach("3 cache kept", "%s stops no store process, yet the probe kept %s of its objects", w.kind, w.kept)
	}
	// A cache that went cold is reported so: the status names when the serving master
	// started empty, within a minute (the manager that reports it may itself have been the
	// fault, and its successor waits out the manager's Lease first).
	if w.kept == fmt.Sprintf("0/%d", probeObjects) && !w.lostBytes {
		deadline := time.Now().Add(time.Minute)
		for s.coldSince().Equal(cold) && time.Now().Before(deadline) {
			time.Sleep(time.Second)
		}
		if s.coldSince().Equal(cold) {
			s.breach("3 cold unreported", "%s: the probe read none of its objects back, yet the backend's status.leader.coldCacheSince did not move within a minute", w.kind)
		} else {
			w.lostBytes = true
		}
	}
	s.event("settled", map[string]any{"kind": w.kind, "took": w.end.Sub(w.start).Round(100 * time.Millisecond).String(),
		"capacity": capacity.Round(100 * time.Millisecond).String(), "cold": w.lostBytes, "probe": w.kept})
}

// sparesTheStore says whether every fault kind leaves the store's processes running, so a
// window of them alone must keep every cached object: the managers come and go, containerd
// restarts under running containers, and the API server's restart is held through by the
// store's leader (its standbys promise not to take over).
func sparesTheStore(kinds []string) bool {
	for _, k := range kinds {
		switch k {
		case faultManagerKill, faultManagersDown, faultContainerd, faultAPIServer:
		default:
			return false
		}
	}
	return true
}

// plan records that the fault may restart the containers of the Pods match selects.
func (s *soak) plan(w *window, match func(p *corev1.Pod) bool) {
	s.mu.Lock()
	w.planned = append(w.planned, match)
	s.mu.Unlock()
}

// coldSince is when the serving master last started cold, as the backend's status says.
func (s *soak) coldSince() time.Time {
	var b kvv1.KVCacheBackend
	if err := env.kube.Get(context.Background(), client.ObjectKey{Name: backendName}, &b); err != nil || b.Status.Leader == nil || b.Status.Leader.ColdCacheSince == nil {
		return time.Time{}
	}
	return b.Status.Leader.ColdCacheSince.Time
}

// watchCapacity samples the backend's status every 500 ms from the fault on; the function it
// returns stops it and says how long after the fault the status last turned Ready with full
// capacity (0 when it never left).
func (s *soak) watchCapacity(w *window) func() time.Duration {
	stop := make(chan struct{})
	done := make(chan time.Duration)
	go func() {
		var lastBad, goodAfter time.Time
		for {
			var b kvv1.KVCacheBackend
			err := env.kube.Get(context.Background(), client.ObjectKey{Name: backendName}, &b)
			ok := false
			if err == nil {
				ok, _ = backendReady(&b, s.w.full)
			}
			now := time.Now()
			if !ok {
				lastBad, goodAfter = now, time.Time{}
			} else if !lastBad.IsZero() && goodAfter.IsZero() {
				goodAfter = now
			}
			select {
			case <-stop:
				switch {
				case lastBad.IsZero():
					done <- 0
				case goodAfter.IsZero():
					done <- now.Sub(w.start)
				default:
					done <- goodAfter.Sub(w.start)
				}
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}

// settle waits until the store is back: every node Ready, the backend Ready with both members'
// capacity, three leader Pods with one serving and holding the Lease, every manager replica
// ready, every Binding's conditions true, the master's ledger equal to the Bindings, and no
// object of ours stuck on a finalizer or owned by something gone.
func (s *soak) settle(bound time.Duration) (bool, string) {
	deadline := time.Now().Add(bound)
	last := ""
	// Settled for 10 s in a row: a fault's effects reach the status a few seconds after it
	// (a killed container's Pod turns unready at the kubelet's next look).
	var since time.Time
	for {
		ok, msg := s.settled()
		if ok && since.IsZero() {
			since = time.Now()
		}
		if !ok {
			since = time.Time{}
		}
		if ok && time.Since(since) >= 10*time.Second {
			// The cluster's own processes too (the NetworkPolicy evaluator, CoreDNS, ...).
			out, err := script("hack/cluster.sh", "status")
			if err == nil {
				return true, ""
			}
			msg = "hack/cluster.sh status: " + strings.Join(strings.Fields(grepLines(out, "stopped")), " ")
		}
		last = msg
		if time.Now().After(deadline) || s.ctx.Err() != nil {
			return false, last
		}
		time.Sleep(time.Second)
	}
}

func (s *soak) settled() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "nodes: " + err.Error()
	}
	for _, n := range nodes.Items {
		if nodeCondition(n, corev1.NodeReady) != corev1.ConditionTrue {
			return false, "node " + n.Name + " not Ready"
		}
	}
	var b kvv1.KVCacheBackend
	if err := env.kube.Get(ctx, client.ObjectKey{Name: backendName}, &b); err != nil {
		return false, err.Error()
	}
	if ok, msg := backendReady(&b, s.w.full); !ok {
		return false, "backend: " + msg
	}
	leaders, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + backendName + ",app.kubernetes.io/component=leader"})
	if err != nil {
		return false, err.Error()
	}
	var ready []string
	for _, p := range leaders.Items {
		if p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false, "leader Pod " + p.Name + " not running"
		}
		if podCondition(&p, corev1.PodReady) {
			ready = append(ready, p.Name)
		}
	}
	if len(leaders.Items) != 3 || len(ready) != 1 {
		return false, fmt.Sprintf("%d leader Pods, %d ready", len(leaders.Items), len(ready))
	}
	lease, err := env.client.CoordinationV1().Leases(systemNS).Get(ctx, backendName+"-leader", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != ready[0] {
		return false, fmt.Sprintf("the store's Lease is not held by the ready leader Pod %s (%v)", ready[0], err)
	}
	d, err := env.client.AppsV1().Deployments(releaseNS).Get(ctx, fullname, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	if d.Status.ReadyReplicas != int32(s.w.chart.Replicas) || d.Status.Replicas != int32(s.w.chart.Replicas) {
		return false, fmt.Sprintf("manager %d/%d ready", d.Status.ReadyReplicas, d.Status.Replicas)
	}
	var bindings kvv1.KVCachePoolBindingList
	if err := env.kube.List(ctx, &bindings); err != nil {
		return false, err.Error()
	}
	want := map[string]bool{}
	for _, bnd := range bindings.Items {
		if bnd.DeletionTimestamp != nil {
			if time.Since(bnd.DeletionTimestamp.Time) > 3*time.Minute {
				return false, fmt.Sprintf("Binding %s/%s deleted %s ago, still held by %v", bnd.Namespace, bnd.Name, time.Since(bnd.DeletionTimestamp.Time).Round(time.Second), bnd.Finalizers)
			}
			continue
		}
		// The conditions that say the Binding serves: granted, its domain its own, its Pods
		// injected as injection writes now (CacheInUse and EvictingOwnObjects describe the load).
		for _, c := range bnd.Status.Conditions {
			bad := (c.Type == kvv1.ConditionQuotaGranted || c.Type == kvv1.ConditionDomainExclusive) && c.Status != metav1.ConditionTrue ||
				c.Type == kvv1.ConditionInjectionCurrent && c.Status == metav1.ConditionFalse
			if bad {
				return false, fmt.Sprintf("Binding %s/%s: %s is %s (%s)", bnd.Namespace, bnd.Name, c.Type, c.Status, c.Message)
			}
		}
		if condTrue(bnd.Status.Conditions, kvv1.ConditionQuotaGranted) {
			want[bnd.Spec.Domain.Name] = true
		}
	}
	admin, err := storeAdmin(ctx, backendName)
	if err != nil {
		return false, err.Error()
	}
	tenants, err := admin.Tenants(ctx)
	if err != nil {
		return false, "the master's ledger: " + err.Error()
	}
	have := map[string]bool{}
	for _, tq := range tenants {
		have[tq.ID] = true
	}
	// A deleted Binding's tenant stays while readers lease its last objects (the pool's
	// status.releasing), for the master's lease TTL after their last read at most.
	var pool kvv1.KVCachePool
	if err := env.kube.Get(ctx, client.ObjectKey{Name: poolName}, &pool); err != nil {
		return false, err.Error()
	}
	for _, rt := range pool.Status.Releasing {
		if time.Since(rt.Since.Time) > releaseBound {
			return false, fmt.Sprintf("tenant %s of the deleted Binding %s still releasing after %s", rt.Tenant, rt.Binding, time.Since(rt.Since.Time).Round(time.Second))
		}
		want[rt.Tenant] = true
	}
	for id := range want {
		if !have[id] {
			return false, "tenant " + id + " of a granted Binding is not in the master's ledger"
		}
	}
	for id := range have {
		if !want[id] && s.bindingHeld(bindings.Items, id) {
			continue
		}
		if !want[id] {
			return false, "tenant " + id + " is in the master's ledger without a Binding"
		}
	}
	if stray := strayOwned(ctx, b.UID); stray != "" {
		return false, stray
	}
	return true, ""
}

// releaseBound is how long a deleted Binding's tenant may stay in the master's ledger: the
// master's default_kv_lease_ttl (5 minutes as the store is rendered) after the last read of its
// objects, plus the pool's next poll.
const releaseBound = 6 * time.Minute

// bindingHeld: a Binding of tenant id is being deleted (its tenant leaves the ledger last).
func (s *soak) bindingHeld(items []kvv1.KVCachePoolBinding, id string) bool {
	for _, b := range items {
		if b.Spec.Domain.Name == id && b.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// strayOwned names an object in the stores' namespace owned by a KVCacheBackend that is gone.
func strayOwned(ctx context.Context, live types.UID) string {
	cs := env.client
	var objs []metav1.Object
	if l, err := cs.AppsV1().Deployments(systemNS).List(ctx, metav1.ListOptions{}); err == nil {
		objs = append(objs, metaOf(l.Items)...)
	}
	if l, err := cs.AppsV1().DaemonSets(systemNS).List(ctx, metav1.ListOptions{}); err == nil {
		objs = append(objs, metaOf(l.Items)...)
	}
	if l, err := cs.CoreV1().Services(systemNS).List(ctx, metav1.ListOptions{}); err == nil {
		objs = append(objs, metaOf(l.Items)...)
	}
	if l, err := cs.CoreV1().ConfigMaps(systemNS).List(ctx, metav1.ListOptions{}); err == nil {
		objs = append(objs, metaOf(l.Items)...)
	}
	if l, err := cs.NetworkingV1().NetworkPolicies(systemNS).List(ctx, metav1.ListOptions{}); err == nil {
		objs = append(objs, metaOf(l.Items)...)
	}
	for _, o := range objs {
		for _, ref := range o.GetOwnerReferences() {
			if ref.Kind == "KVCacheBackend" && ref.UID != live {
				return fmt.Sprintf("%s is owned by a KVCacheBackend that is gone (uid %s)", o.GetName(), ref.UID)
			}
		}
	}
	return ""
}

// storeAdmin is a backend's serving master's admin API through its leader Service: the
// ClusterIP, which kube-proxy on this host routes to the serving leader, as it does for Pods.
// Every call opens a new connection, as a new client does: the master's admin server answers
// 404 for as long as a connection lives that it accepted while it was starting.
func storeAdmin(ctx context.Context, backend string) (*store.Client, error) {
	svc, err := env.client.CoreV1().Services(systemNS).Get(ctx, backend+"-leader", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return store.New(fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, adminPort), store.WithTimeout(time.Second),
		store.WithTransport(&http.Transport{DisableKeepAlives: true})), nil
}

// The faults.

func (s *soak) servingLeader(ctx context.Context) (*corev1.Pod, error) {
	l, err := env.client.CoreV1().Pods(systemNS).List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelStoreLeader + "=true,app.kubernetes.io/instance=" + backendName})
	if err != nil {
		return nil, err
	}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && podCondition(&p, corev1.PodReady) {
			return &p, nil
		}
	}
	return nil, fmt.Errorf("no ready leader Pod labelled %s=true", vocab.LabelStoreLeader)
}

// untilDone retries a fault's action for up to 90 s: overlapping another fault, its target
// may be unreachable for a while (the API server restarting, the serving master's node off
// until a standby serves).
func (s *soak) untilDone(act func() error) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := act()
		if err == nil || time.Now().After(deadline) || s.ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second)
	}
}

func (s *soak) deleteLeaderPod(w *window, _ int) error {
	return s.untilDone(func() error {
		p, err := s.servingLeader(s.ctx)
		if err != nil {
			return err
		}
		s.event("fault action", map[string]any{"kind": faultLeaderDelete, "pod": p.Name})
		return env.client.CoreV1().Pods(systemNS).Delete(s.ctx, p.Name, metav1.DeleteOptions{})
	})
}

func (s *soak) killMaster(w *window, _ int) error {
	return s.untilDone(func() error {
		p, err := s.servingLeader(s.ctx)
		if err != nil {
			return err
		}
		s.plan(w, func(q *corev1.Pod) bool { return q.UID == p.UID })
		s.event("fault action", map[string]any{"kind": faultMasterKill, "pod": p.Name})
		return sigkill(p)
	})
}

// sigkill kills a Pod's first container through its node's containerd.
func sigkill(p *corev1.Pod) error {
	if len(p.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("pod %s has no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, err := exec.Command("ctr", "-a", env.nodeSocket[p.Spec.NodeName], "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr tasks kill -s SIGKILL %s: %w: %s", id, err, out)
	}
	return nil
}

func (s *soak) killManagerLeader(w *window, _ int) error {
	return s.untilDone(func() error { return s.killManagerLeaderOnce(w) })
}

func (s *soak) killManagerLeaderOnce(w *window) error {
	l, err := env.client.CoordinationV1().Leases(systemNS).Get(s.ctx, managerLease, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the manager's Lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil {
		return fmt.Errorf("the manager's Lease %s names no holder", managerLease)
	}
	name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	p, err := env.client.CoreV1().Pods(releaseNS).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.plan(w, func(q *corev1.Pod) bool { return q.UID == p.UID })
	s.event("fault action", map[string]any{"kind": faultManagerKill, "pod": p.Name})
	return sigkill(p)
}

func (s *soak) managersDown(w *window, _ int) error {
	s.collectLogs()
	if _, err := cli(s.ctx, nil, env.kubectl, "-n", releaseNS, "scale", "deployment/"+fullname, "--replicas=0"); err != nil {
		return err
	}
	s.event("fault action", map[string]any{"kind": faultManagersDown})
	for t0 := time.Now(); time.Since(t0) < time.Minute; time.Sleep(250 * time.Millisecond) {
		l, err := env.client.CoreV1().Pods(releaseNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kvcache-operator"})
		if err == nil && len(l.Items) == 0 {
			break
		}
	}
	none := [2]time.Time{time.Now()}
	time.Sleep(30 * time.Second)
	none[1] = time.Now()
	s.mu.Lock()
	s.noManager = append(s.noManager, none)
	s.mu.Unlock()
	out, err := cli(context.Background(), nil, env.kubectl, "-n", releaseNS, "scale", "deployment/"+fullname, fmt.Sprintf("--replicas=%d", s.w.chart.Replicas))
	if err != nil {
		return fmt.Errorf("scale back: %w: %s", err, out)
	}
	return nil
}

func (s *soak) nodeOff(w *window, n int) error {
	i := n % len(env.sockets)
	node := fmt.Sprintf("node-%d", i)
	s.plan(w, func(q *corev1.Pod) bool { return q.Spec.NodeName == node })
	s.collectLogs()
	s.event("fault action", map[string]any{"kind": faultNodeOff, "node": node})
	off, err := script("hack/cluster.sh", "node-off", fmt.Sprint(i))
	if err != nil {
		return fmt.Errorf("node-off: %w: %s", err, off)
	}
	time.Sleep(60 * time.Second)
	on, err := script("hack/cluster.sh", "node-on", fmt.Sprint(i))
	if err != nil {
		return fmt.Errorf("node-on: %w: %s", err, on)
	}
	// What the script stopped and started, whole: the timeline then tells what a node's power
	// loss touched.
	s.event("fault done", map[string]any{"kind": faultNodeOff, "node": node, "off": off, "on": on})
	return nil
}

func (s *soak) restartAPIServer(w *window, _ int) error {
	// The restart takes 15-20 s here (its graceful stop alone is 15 s), longer than the
	// manager's renew deadline (10 s): the manager's leading replica stops leading and exits,
	// by design. The store's leader keeps its master on its standbys' promises, unless another
	// fault of the window holds a standby away (a node off): then it stops at its renew
	// deadline (7 s) and its container restarts as a standby.
	s.plan(w, func(q *corev1.Pod) bool {
		return q.Namespace == releaseNS || q.Labels["app.kubernetes.io/component"] == "leader"
	})
	s.event("fault action", map[string]any{"kind": faultAPIServer})
	out, err := script("hack/cluster.sh", "restart", "kube-apiserver")
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	s.event("fault done", map[string]any{"kind": faultAPIServer, "out": lastLine(out)})
	return nil
}

func (s *soak) restartContainerd(w *window, n int) error {
	i := n % len(env.sockets)
	s.event("fault action", map[string]any{"kind": faultContainerd, "node": fmt.Sprintf("node-%d", i)})
	out, err := script("hack/cluster.sh", "restart", fmt.Sprintf("containerd-%d", i))
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// soakProbe is a stand-in that put probeObjects objects once (bytes derived from each key) and
// reads them all back on GET /probe: what a fault kept of the cache, and whether any read
// returned another key's bytes.
type soakProbe struct {
	name     string
	ip       string
	uid      string
	restarts int32
}

// startSoakProbe (re)creates the probe and waits until every object is written and read back.
func (s *soak) startSoakProbe() (*soakProbe, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	name := fmt.Sprintf("soak-probe-%d", time.Now().Unix())
	p := labelledPod(name, bindingName, "5")
	p.Labels["kvcache-soak"] = "probe"
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env,
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PROBE_OBJECTS", Value: fmt.Sprint(probeObjects)},
		corev1.EnvVar{Name: "KVCACHE_STANDIN_PROBE_BYTES", Value: "65536"})
	if _, err := createPod(ctx, p, false); err != nil {
		return nil, err
	}
	for {
		cur, err := env.client.CoreV1().Pods(bindingNS).Get(ctx, name, metav1.GetOptions{})
		if err == nil && podCondition(cur, corev1.PodReady) && cur.Status.PodIP != "" {
			pr := &soakProbe{name: name, ip: cur.Status.PodIP, uid: string(cur.UID), restarts: cur.Status.ContainerStatuses[0].RestartCount}
			if r, err := (&probe{name: name, ip: pr.ip}).read(); err == nil && r.Written == probeObjects && r.Kept == probeObjects {
				return pr, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the probe %s never had its %d objects written: %w", name, probeObjects, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// noProbe is what readProbe says when there was no probe to read.
const noProbe = "no probe"

// readProbe reads the probe after a fault: "kept/N", or why it cannot say; a wrong read is a
// breach. A probe that lost objects, restarted or went is replaced for the next fault.
func (s *soak) readProbe(w *window) string {
	pr := s.probe
	if pr == nil {
		return noProbe
	}
	verdict := ""
	cur, err := env.client.CoreV1().Pods(bindingNS).Get(s.ctx, pr.name, metav1.GetOptions{})
	switch {
	case err != nil:
		verdict = "probe gone"
	case len(cur.Status.ContainerStatuses) == 0 || cur.Status.ContainerStatuses[0].RestartCount != pr.restarts || cur.Status.PodIP != pr.ip:
		verdict = "probe restarted"
	default:
		r, err := (&probe{name: pr.name, ip: pr.ip}).read()
		if err != nil {
			verdict = "probe unreadable: " + err.Error()
			break
		}
		if r.Wrong > 0 {
			s.breach("4 wrong bytes", "%s: the probe read %d object(s) back with another key's bytes", w.kind, r.Wrong)
		}
		verdict = fmt.Sprintf("%d/%d", r.Kept, r.Objects)
		if r.Kept == r.Objects && r.Wrong == 0 {
			return verdict
		}
	}
	_ = deletePod(context.Background(), bindingNS, pr.name, 0)
	next, err := s.startSoakProbe()
	if err != nil {
		s.breach("3 settle", "the probe could not be replaced after %s: %v", w.kind, err)
		s.probe = nil
	} else {
		s.probe = next
	}
	return verdict
}
