//go:build linux

// Package ha_test proves high availability on the STOCK Mooncake master: three `kvcache elect`
// launchers (the binary built from this repository) campaign for the backend's Lease on a real
// kube-apiserver and etcd (envtest), authenticated as the leader's ServiceAccount with exactly
// the rendered grants, and run the PyPI wheel's mooncake_master only while they lead. A real
// member (mc_store_rest_server, with the rendered env) and a real Python client
// (MooncakeDistributedStore) use the master through one address, as they would the leader
// Service. The test then stops the leader gracefully, kills its whole Pod, isolates it from
// the API server and its peers and steals its Lease, and measures each failover from the signal
// to a new master serving, to the member's segment registered again and to a client put
// succeeding. It also takes the API server away from every launcher, and from the leader alone,
// and proves the serving master is kept (the peer protocol): same process, same term, the
// objects written before read back; a launcher that starts meanwhile does not take over; and an
// outage longer than --max-hold ends the term, fenced as before.
//
// No kubelet runs: the leader Pods are plain objects (the launchers label them), each with its
// own loopback address as its Pod IP (the launchers talk to each other there, and check each
// other's address against the Pod), the masters sharing one rpc and admin port, which only the
// serving master can bind, as only it is behind the Service. hack/mooncake.sh and
// KUBEBUILDER_ASSETS (`make tools`) are required: without them the test fails, never skips.
// Run with -v for the timings; -ha.runs sets how many graceful and crash failovers it measures.
//
// Warm failover (leader.electionBackend: Etcd) is proven the same way, with a real etcd and
// masters in their own etcd HA mode with the rendered flags: what the stock masters keep and
// where they return another key's bytes (TestStockWarmFailover), every interleaving of an
// engine's operations with a failover (TestWarmInterleavings), a member restarted around one
// (TestFreshMemberNames) and a member drained through one (TestWarmDrainThroughFailover).
package ha_test

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/leader"
	"github.com/kvcache-operator/kvcache/vocab"
)

const (
	systemNamespace = "gpustack-system"
	backendName     = "mooncake-dram"
	tenant          = "team-a-chat"

	segmentSize  = 64 << 20 // capacityPerMember
	localBuffer  = 16 << 20 // the member's and the client's staging buffer
	payloadBytes = 1 << 20  // what the client puts

	// The failover goals, signal to a successful client put.
	gracefulGoal = 5 * time.Second
	crashGoal    = 20 * time.Second

	// apiAway is how long the API server is away in the hold steps: the measured restart of
	// the real cluster's API server (20 s).
	apiAway = 20 * time.Second
	// testMaxHold is the launchers' --max-hold here: shorter than the default, so the step that
	// outlasts it is short too.
	testMaxHold = 30 * time.Second
	// testUnservedGrace is the launchers' --unserved-grace here (the default is 30 s).
	testUnservedGrace = 6 * time.Second
)

var runs = flag.Int("ha.runs", 3, "how many graceful and how many crash failovers to measure")

// leaderPod is one leader Pod: its launcher (restarted in place, as the kubelet restarts a
// container), its emptyDir holding the ledger copy, and its own path to the API server.
type leaderPod struct {
	name   string
	ip     string // its Pod IP: a loopback address of its own
	dir    string
	proxy  *apiProxy
	kc     string
	p      *proc
	policy string
}

// haCluster is the test's view of one backend: its rendered pieces, its leader Pods, the
// serving master's admin API and the client kept across failovers.
type haCluster struct {
	t        *testing.T
	c        client.Client
	kvcache  string
	venvBin  string
	argv     func(policy string) []string
	rendered renderedStore
	flags    []string // the rendered launcher flags, between "elect" and "--"
	peerPort int
	seed     string
	kc       []byte
	apiAddr  string
	readyURL string // the rendered readiness probe's path
	admin    admin
	pods     []*leaderPod
	client   *storeClient
	samples  map[string][]sample
}

// sample is one failover, each figure from the signal.
type sample struct {
	serving, member, put time.Duration
}

func TestLeaseFailover(t *testing.T) {
	testStart := time.Now()
	venvBin := mooncaketest.Bin(t, "python")
	env := startEnvtest(t)
	kvcache := buildKvcache(t)
	st := renderStore(t, env.Client)
	applyLeaderAccess(t, env.Client, st)
	ports := mooncaketest.FreePorts(t, 4)
	rpcPort, adminPort, restPort, peerPort := ports[0], ports[1], ports[2], ports[3]
	rpcAddr := "127.0.0.1:" + strconv.Itoa(rpcPort)
	probe := st.leader.Spec.Template.Spec.Containers[0].ReadinessProbe
	require.NotNil(t, probe)
	require.NotNil(t, probe.HTTPGet)
	cl := &haCluster{
		t: t, c: env.Client, kvcache: kvcache, venvBin: venvBin,
		rendered: st, argv: masterArgv(t, st, rpcPort, adminPort), flags: launcherFlags(t, st), peerPort: peerPort, seed: st.seed,
		kc: leaderKubeconfig(t, env), apiAddr: apiServerAddr(t, env),
		readyURL: probe.HTTPGet.Path,
		admin:    admin{base: "http://127.0.0.1:" + strconv.Itoa(adminPort)},
		samples:  map[string][]sample{},
	}
	require.Equal(t, "/get_all_segments", cl.readyURL)

	// ---- 1. Three launchers on one Lease: exactly one master serves. ------------------------
	for i := range 3 {
		p := &leaderPod{name: generator.LeaderName(backendName) + "-" + strconv.Itoa(i), ip: "127.0.0." + strconv.Itoa(11+i)}
		createLeaderPod(t, env.Client, st, p.name, p.ip)
		cl.pods = append(cl.pods, p)
	}
	for _, p := range cl.pods {
		cl.start(p)
	}
	lead := cl.awaitLeader(30*time.Second, "")
	t.Logf("first leader: %s", lead.name)

	// ---- 2. A member registers; a client puts and gets bytes. --------------------------------
	member := mooncaketest.Start(t, "mc_store_rest_server", 6*time.Second,
		append(memberEnv(t, st, rpcAddr), "MC_STORE_CLIENT_SETUP_RETRIES=2"),
		filepath.Join(venvBin, "mc_store_rest_server"), "--port="+strconv.Itoa(restPort))
	_, err := poll(20*time.Second, func() error { return cl.capacityIs(segmentSize) })
	require.NoError(t, err, "the member's segment is mounted")
	cl.client = startClient(t, filepath.Join(venvBin, "python"), rpcAddr, tenant, localBuffer)
	rc, ok, err := cl.client.put("before-any-failover", payloadBytes)
	require.NoError(t, err)
	require.True(t, ok, "the first put: rc %d", rc)
	lastKey := "before-any-failover"

	// ---- 3. Graceful failovers (SIGTERM to the leader's launcher) and crashes (SIGKILL of
	// the launcher and its master: the Pod dies). -----------------------------------------------
	for i := range *runs {
		lastKey = cl.failover("graceful", i, lastKey)
	}
	for i := range *runs {
		lastKey = cl.failover("crash", i, lastKey)
	}

	// ---- 4. The master alone dies: its launcher releases the Lease and exits with its status.
	lastKey = cl.failover("master", 0, lastKey)

	// ---- 5. The leader's container dies and restarts in place (same Pod, same identity).
	lastKey = cl.restartInPlace(lastKey)

	// ---- 6. The API server goes away from every launcher (a control-plane restart): the
	// leader keeps its master on its standbys' promises, and a launcher that starts meanwhile,
	// which the leader never acknowledged, does not take over. Then from the leader alone: the
	// standbys renew the Lease on its behalf. ------------------------------------------------
	lastKey = cl.heldThrough("api-away", lastKey)
	lastKey = cl.heldThrough("leader-cut", lastKey)

	// ---- 7. The leader loses the API server and hears from no standby (they are frozen): it
	// kills its master before a standby may start one. An outage longer than --max-hold ends
	// the term the same way once the promises run out. ----------------------------------------
	lastKey = cl.failover("isolated", 0, lastKey)
	lastKey = cl.failover("past-max-hold", 0, lastKey)

	// ---- 8. The leader's Pod reads Ready=False (its node's kubelet or runtime is gone, so the
	// leader Service no longer routes to it): it hands over as on SIGTERM. -------------------
	lastKey = cl.failover("unserved", 0, lastKey)

	// ---- 9. Another holder takes the Lease: the leader kills its master at once and leaves
	// the Lease alone. -------------------------------------------------------------------------
	cl.stolen(lastKey)

	// Stop the member while a master still runs (it unmounts and exits; without a master it
	// ignores SIGTERM for its whole grace period).
	member.Stop()

	t.Logf("failover timings over %d run(s) each, from the signal (min / median / max):", *runs)
	for _, kind := range []string{"graceful", "crash", "master", "isolated", "past-max-hold", "unserved"} {
		s := cl.samples[kind]
		t.Logf("  %-9s master serving %s; member re-registered %s; client put succeeded %s",
			kind, stats(s, func(x sample) time.Duration { return x.serving }),
			stats(s, func(x sample) time.Duration { return x.member }),
			stats(s, func(x sample) time.Duration { return x.put }))
	}
	t.Logf("whole test %s", time.Since(testStart).Round(time.Millisecond))
	assert.LessOrEqual(t, median(cl.samples["graceful"], func(x sample) time.Duration { return x.put }), gracefulGoal,
		"graceful handover: the median time to a successful put meets the goal")
	assert.LessOrEqual(t, median(cl.samples["crash"], func(x sample) time.Duration { return x.put }), crashGoal,
		"crash handover: the median time to a successful put meets the goal")
}

// start (re)starts a Pod's launcher container.
func (cl *haCluster) start(p *leaderPod) {
	t := cl.t
	t.Helper()
	if p.dir == "" {
		// First start of the Pod: its emptyDir, seeded as the init container seeds it, and its
		// own path to the API server.
		p.dir = t.TempDir()
		p.policy = filepath.Join(p.dir, "tenant-quota-policy.yaml")
		require.NoError(t, os.WriteFile(p.policy, []byte(cl.seed), 0o644))
		p.proxy = startAPIProxy(t, cl.apiAddr)
		p.kc = filepath.Join(p.dir, "kubeconfig")
		require.NoError(t, os.WriteFile(p.kc, kubeconfigVia(t, cl.kc, p.proxy.addr()), 0o600))
	}
	args := append([]string{"elect", "--kubeconfig", p.kc}, cl.flags...)
	args = append(args, "--peer-port="+strconv.Itoa(cl.peerPort), "--peer-address="+net.JoinHostPort(p.ip, strconv.Itoa(cl.peerPort)),
		"--max-hold="+testMaxHold.String(), "--unserved-grace="+testUnservedGrace.String(), "--")
	args = append(args, cl.argv(p.policy)...)
	p.p = startProc(t, "kvcache elect ("+p.name+")", []string{
		"POD_NAME=" + p.name, "POD_NAMESPACE=" + systemNamespace,
		"PATH=" + cl.venvBin + string(os.PathListSeparator) + os.Getenv("PATH"), // mooncake_master, as on the store image
	}, nil, nil, cl.kvcache, args...)
	_, err := poll(20*time.Second, func() error {
		if p.p.Exited() {
			return fmt.Errorf("%s exited (%d):\n%s", p.p.name, p.p.ExitCode(), p.p.Output())
		}
		if _, ok := p.p.event("standby: campaigning for the Lease"); !ok {
			return fmt.Errorf("%s is not campaigning yet", p.p.name)
		}
		return nil
	})
	require.NoError(t, err)
}

func (cl *haCluster) pod(name string) *leaderPod {
	for _, p := range cl.pods {
		if p.name == name {
			return p
		}
	}
	cl.t.Fatalf("no leader Pod %q", name)
	return nil
}

func (cl *haCluster) capacityIs(want int64) error {
	got, err := cl.admin.capacity(cl.t.Context())
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("master_total_capacity_bytes %d, want %d", got, want)
	}
	return nil
}

func (cl *haCluster) serving() error {
	_, err := cl.admin.get(cl.t.Context(), cl.readyURL)
	return err
}

// awaitLeader waits until one launcher, not notName, leads: the Lease names it, its master
// runs and serves, no other launcher runs a master, and the Pod labels say so (but for
// notName's, which a dead Pod cannot have corrected).
func (cl *haCluster) awaitLeader(d time.Duration, notName string) *leaderPod {
	t := cl.t
	t.Helper()
	var lead *leaderPod
	_, err := poll(d, func() error {
		l, err := leaseOf(t.Context(), cl.c)
		if err != nil {
			return err
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if holder == "" || holder == notName {
			return fmt.Errorf("the Lease names %q", holder)
		}
		lead = cl.pod(holder)
		if err := cl.serving(); err != nil {
			return err
		}
		return cl.oneMaster(lead)
	})
	require.NoError(t, err, "a leader other than %q", notName)
	_, err = poll(10*time.Second, func() error { return cl.labels(lead, notName) })
	require.NoError(t, err)
	return lead
}

// steadyLeader waits for a leader that acknowledged every standby, and returns it, its master's
// start and the Lease as it stands.
func (cl *haCluster) steadyLeader() (*leaderPod, logEvent, *coordinationv1.Lease) {
	t := cl.t
	t.Helper()
	old := cl.awaitLeader(30*time.Second, "")
	cl.peersAcked(old)
	oldMaster, _ := old.p.event("master started")
	before, err := leaseOf(t.Context(), cl.c)
	require.NoError(t, err)
	return old, oldMaster, before
}

// peersAcked waits until lead acknowledged every running standby as its peer in its term, as
// it does within a retry period or two of a new term (a standby it did not acknowledge takes
// over only after --max-hold more).
func (cl *haCluster) peersAcked(lead *leaderPod) {
	t := cl.t
	t.Helper()
	_, err := poll(15*time.Second, func() error {
		became, ok := lead.p.event("became leader")
		if !ok {
			return fmt.Errorf("%s does not lead", lead.name)
		}
		for _, p := range cl.pods {
			if p == lead || p.p.Exited() {
				continue
			}
			found := false
			for _, e := range lead.p.events() {
				if e.Msg == "acknowledged a peer: the master is held past failing renewals only with its promise" &&
					!e.at().Before(became.at()) && strings.Contains(e.raw, `"peer":"`+p.name+`"`) {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("%s has not acknowledged %s", lead.name, p.name)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// oneMaster checks that lead's launcher runs a master and no other launcher does.
func (cl *haCluster) oneMaster(lead *leaderPod) error {
	for _, p := range cl.pods {
		if p.p.Exited() {
			continue
		}
		kids := childrenOf(p.p.Pid())
		if p == lead {
			ev, ok := p.p.event("master started")
			if !ok || len(kids) != 1 || kids[0] != ev.PID {
				return fmt.Errorf("the leader %s runs %v, its log says master pid %d", p.name, kids, ev.PID)
			}
			continue
		}
		if len(kids) != 0 {
			return fmt.Errorf("standby %s runs processes %v", p.name, kids)
		}
	}
	return nil
}

// labels checks that only lead's Pod reads store-leader=true, every other "false", except
// for the Pod named skip.
func (cl *haCluster) labels(lead *leaderPod, skip string) error {
	for _, p := range cl.pods {
		if p.name == skip {
			continue
		}
		want := strconv.FormatBool(p == lead)
		got, err := leaderLabel(cl.t.Context(), cl.c, p.name)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("Pod %s: %s=%q, want %q", p.name, vocab.LabelStoreLeader, got, want)
		}
	}
	return nil
}

type putResult struct {
	at       time.Time
	key      string
	attempts int
	err      error
}

// putUntilOK puts fresh keys until one succeeds, from another goroutine (the client is not
// used elsewhere meanwhile).
func (cl *haCluster) putUntilOK(prefix string, budget time.Duration) <-chan putResult {
	res := make(chan putResult, 1)
	go func() {
		deadline := time.Now().Add(budget)
		for i := 1; ; i++ {
			key := fmt.Sprintf("%s-%d", prefix, i)
			rc, ok, err := cl.client.put(key, payloadBytes)
			switch {
			case err != nil:
				res <- putResult{err: err}
				return
			case ok:
				res <- putResult{at: time.Now(), key: key, attempts: i}
				return
			case time.Now().After(deadline):
				res <- putResult{err: fmt.Errorf("no successful put within %s (%d attempts, last rc %d)", budget, i, rc)}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return res
}

// failover ends the current leader's term the way kind says, measures the handover and checks
// what everyone reads afterwards; it returns the key the client wrote under the new master.
func (cl *haCluster) failover(kind string, run int, prevKey string) string {
	t := cl.t
	t.Helper()
	ctx := t.Context()
	old, oldMaster, before := cl.steadyLeader()
	transitions := ptr.Deref(before.Spec.LeaseTransitions, 0)

	t0 := time.Now()
	switch kind {
	case "graceful": // the kubelet stopping the container: SIGTERM to its first process only
		old.p.Signal(syscall.SIGTERM)
	case "crash": // the Pod dying: every process of it, at once
		_ = syscall.Kill(-oldMaster.PID, syscall.SIGKILL)
		_ = syscall.Kill(-old.p.Pid(), syscall.SIGKILL)
	case "master": // the master alone dies (the OOM killer picks the biggest process)
		_ = syscall.Kill(oldMaster.PID, syscall.SIGKILL)
	case "isolated": // cut from the API server, and no standby answers it
		for _, p := range cl.pods {
			if p != old {
				p.p.Signal(syscall.SIGSTOP)
			}
		}
		old.proxy.setCut(true)
	case "past-max-hold": // the API server away from everyone for longer than --max-hold
		for _, p := range cl.pods {
			p.proxy.setCut(true)
		}
	case "unserved": // its Pod reads Ready=False, as a kubelet reports it (or the node controller for a lost node)
		setPodReady(t, cl.c, old.name, corev1.ConditionFalse)
	default:
		t.Fatalf("failover kind %q", kind)
	}
	budget := 30 * time.Second
	switch kind {
	case "graceful":
	case "past-max-hold":
		budget = testMaxHold + 30*time.Second
	default:
		budget = 45 * time.Second
	}
	// Until the old master is gone the shared ports are its; afterwards whatever answers is new.
	_, err := poll(budget, func() error {
		if processAlive(oldMaster.PID) {
			return fmt.Errorf("the old master %d still runs", oldMaster.PID)
		}
		return nil
	})
	require.NoError(t, err)
	switch kind {
	case "isolated":
		for _, p := range cl.pods {
			if p != old {
				p.p.Signal(syscall.SIGCONT)
			}
		}
	case "past-max-hold":
		for _, p := range cl.pods {
			p.proxy.setCut(false)
		}
	}
	puts := cl.putUntilOK(fmt.Sprintf("%s-%d-after", kind, run), budget)
	servingAt, err := poll(budget, cl.serving)
	require.NoError(t, err, "%s %d: a new master serves", kind, run)
	memberAt, err := poll(budget, func() error { return cl.capacityIs(segmentSize) })
	require.NoError(t, err, "%s %d: the member re-registers by itself", kind, run)
	put := <-puts
	require.NoError(t, put.err, "%s %d: a client put succeeds", kind, run)
	s := sample{serving: servingAt.Sub(t0), member: memberAt.Sub(t0), put: put.at.Sub(t0)}
	cl.samples[kind] = append(cl.samples[kind], s)
	t.Logf("%s %d: %s -> serving %s, member %s, put %s (%d attempt(s))", kind, run, old.name,
		s.serving.Round(time.Millisecond), s.member.Round(time.Millisecond), s.put.Round(time.Millisecond), put.attempts)

	// The new leader, seen by everyone.
	lead := cl.awaitLeader(10*time.Second, old.name)
	after, err := leaseOf(ctx, cl.c)
	require.NoError(t, err)
	assert.Equal(t, transitions+1, ptr.Deref(after.Spec.LeaseTransitions, 0), "one more leader transition")
	assert.Equal(t, int32(leader.DefaultLeaseDuration/time.Second), ptr.Deref(after.Spec.LeaseDurationSeconds, 0))
	newStart, ok := lead.p.event("master started")
	require.True(t, ok)
	assert.Zero(t, cl.client.get(t, prevKey), "the key written before the failover misses: a new master starts with a cold cache")

	// How the old term ended, by the old launcher's own account.
	switch kind {
	case "graceful":
		assert.Equal(t, 0, old.p.Wait(t, 15*time.Second), "a graceful stop exits 0")
		msgs := old.p.messages()
		require.GreaterOrEqual(t, len(msgs), 4)
		assert.Equal(t, []string{"stopping the master", "master stopped", "released the Lease", "lingering so connections to this Pod are refused, not dropped, until a standby serves"}, msgs[len(msgs)-4:])
		stopped, _ := old.p.event("master stopped")
		released, _ := old.p.event("released the Lease")
		lingering, _ := old.p.event("lingering so connections to this Pod are refused, not dropped, until a standby serves")
		assert.False(t, lingering.at().Before(released.at()), "it lingers only once the Lease is released: a standby takes over meanwhile")
		assert.False(t, released.at().Before(stopped.at()), "the master stops before the Lease is released")
		assert.False(t, newStart.at().Before(released.at()), "the new master starts after the release")
		label, err := leaderLabel(ctx, cl.c, old.name)
		require.NoError(t, err)
		assert.Equal(t, "false", label, "the old leader unlabelled itself")
	case "crash":
		old.p.Wait(t, 5*time.Second)
		cl.predecessorUnlabelled(lead, old)
	case "master":
		assert.Equal(t, 128+int(syscall.SIGKILL), old.p.Wait(t, 15*time.Second), "the launcher exits with the master's status")
		msgs := old.p.messages()
		require.GreaterOrEqual(t, len(msgs), 2)
		assert.Equal(t, []string{"master exited while leading", "released the Lease"}, msgs[len(msgs)-2:])
		released, _ := old.p.event("released the Lease")
		assert.False(t, newStart.at().Before(released.at()), "the new master starts after the release")
	case "unserved":
		assert.Equal(t, 1, old.p.Wait(t, 15*time.Second), "a launcher that handed over by itself exits 1")
		msgs := old.p.messages()
		require.GreaterOrEqual(t, len(msgs), 4)
		assert.Equal(t, []string{"handing over: this master is not served", "stopping the master", "master stopped", "released the Lease"}, msgs[len(msgs)-4:])
		handing, _ := old.p.event("handing over: this master is not served")
		assert.Contains(t, handing.raw, "its Pod has read Ready=False for")
		assert.InDelta(t, testUnservedGrace.Seconds(), handing.at().Sub(t0).Seconds(), 3, "it hands over once its Pod read not Ready for --unserved-grace")
		released, _ := old.p.event("released the Lease")
		assert.False(t, newStart.at().Before(released.at()), "the new master starts after the release")
		t.Logf("unserved: %s handed over %s after its Pod read Ready=False", old.name, handing.at().Sub(t0).Round(time.Millisecond))
		setPodReady(t, cl.c, old.name, "") // the restarted container reports nothing (no kubelet here)
	case "isolated", "past-max-hold":
		assert.Equal(t, 1, old.p.Wait(t, 20*time.Second), "a lost Lease exits 1")
		lost, ok := old.p.event("lost the Lease: killing the master")
		require.True(t, ok, "the old launcher says it lost the Lease:\n%s", old.p.Output())
		t.Logf("%s: %s gave up the Lease %s after the cut (%s); the new master started %s after the cut",
			kind, old.name, lost.at().Sub(t0).Round(time.Millisecond), lost.Reason, newStart.at().Sub(t0).Round(time.Millisecond))
		if kind == "isolated" {
			assert.Equal(t, "no successful renewal for "+leader.DefaultRenewDeadline.String(), lost.Reason, "no standby promised: no hold")
			assert.LessOrEqual(t, lost.at().Sub(t0), leader.DefaultRenewDeadline+2*time.Second, "the master is killed within the renew deadline of the last renewal")
		} else {
			assert.Contains(t, lost.Reason, "the peers' promises ran out")
			assert.InDelta(t, testMaxHold.Seconds(), lost.at().Sub(t0).Seconds(), 2, "the promises carry the master --max-hold past the last renewal, no longer")
		}
		stopped, _ := old.p.event("master stopped")
		assert.True(t, stopped.at().Before(newStart.at()), "the old master was dead before the new one started (%s, %s)", stopped.at(), newStart.at())
		cl.predecessorUnlabelled(lead, old)
		old.proxy.setCut(false)
	}
	// The container restarts (or the Deployment replaces the Pod): a standby again, labelled so.
	cl.start(old)
	_, err = poll(10*time.Second, func() error { return cl.labels(lead, "") })
	require.NoError(t, err)
	require.NoError(t, cl.oneMaster(lead))
	return put.key
}

// restartInPlace kills the leader's launcher and master and starts the launcher again in the
// same Pod at once, as the kubelet restarts a container: the Lease still names this Pod, so it
// takes its own Lease back without waiting for it to expire. The master is new and its cache
// cold, and the Lease says so: one more transition and a new acquireTime (client-go alone would
// keep both for a holder that did not change, and an operator that was away would miss it).
func (cl *haCluster) restartInPlace(prevKey string) string {
	t := cl.t
	t.Helper()
	ctx := t.Context()
	old := cl.awaitLeader(30*time.Second, "")
	oldMaster, _ := old.p.event("master started")
	before, err := leaseOf(ctx, cl.c)
	require.NoError(t, err)
	t0 := time.Now()
	_ = syscall.Kill(-oldMaster.PID, syscall.SIGKILL)
	_ = syscall.Kill(-old.p.Pid(), syscall.SIGKILL)
	old.p.Wait(t, 5*time.Second)
	cl.start(old)
	lead := cl.awaitLeader(15*time.Second, "")
	require.Equal(t, old.name, lead.name, "the restarted launcher takes its own Lease back")
	servingAt := time.Now()
	put := <-cl.putUntilOK("after-restart-in-place", 30*time.Second)
	require.NoError(t, put.err)
	t.Logf("restart in place: %s leads again, serving %s and a put %s after the kill",
		lead.name, servingAt.Sub(t0).Round(time.Millisecond), put.at.Sub(t0).Round(time.Millisecond))
	after, err := leaseOf(ctx, cl.c)
	require.NoError(t, err)
	assert.Equal(t, ptr.Deref(before.Spec.LeaseTransitions, 0)+1, ptr.Deref(after.Spec.LeaseTransitions, 0), "one more transition: a new term of the same holder")
	assert.True(t, after.Spec.AcquireTime.After(before.Spec.AcquireTime.Time), "a new acquireTime: %s, then %s", before.Spec.AcquireTime, after.Spec.AcquireTime)
	assert.Zero(t, cl.client.get(t, prevKey), "yet the master is new: a cold cache")
	return put.key
}

// predecessorUnlabelled checks that the new leader corrected the label of a predecessor that
// could not (its Pod died, or it lost the API server).
func (cl *haCluster) predecessorUnlabelled(lead, old *leaderPod) {
	t := cl.t
	t.Helper()
	_, err := poll(10*time.Second, func() error {
		label, err := leaderLabel(t.Context(), cl.c, old.name)
		if err != nil {
			return err
		}
		if label != "false" {
			return fmt.Errorf("Pod %s: %s=%q", old.name, vocab.LabelStoreLeader, label)
		}
		return nil
	})
	require.NoError(t, err, "the new leader labels its predecessor's Pod as standby")
	_, ok := lead.p.event("labelled the previous leader's Pod as standby")
	assert.True(t, ok, "by the new leader's own account")
}

// stolen: another holder writes the Lease (as a launcher would that took over while this one
// could not renew); the leader kills its master at once, exits 1 and never writes the Lease
// again. Once that holder releases it, a standby takes over.
func (cl *haCluster) stolen(prevKey string) {
	t := cl.t
	t.Helper()
	ctx := t.Context()
	old := cl.awaitLeader(30*time.Second, "")
	oldMaster, _ := old.p.event("master started")
	l, err := leaseOf(ctx, cl.c)
	require.NoError(t, err)
	now := metav1.NowMicro()
	l.Spec.HolderIdentity = ptr.To("intruder")
	l.Spec.LeaseDurationSeconds = ptr.To[int32](30)
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	t0 := time.Now()
	require.NoError(t, cl.c.Update(ctx, l))
	assert.Equal(t, 1, old.p.Wait(t, 10*time.Second), "a lost Lease exits 1")
	t.Logf("stolen Lease: %s exited %s after the theft", old.name, time.Since(t0).Round(time.Millisecond))
	lost, ok := old.p.event("lost the Lease: killing the master")
	require.True(t, ok)
	assert.Equal(t, `the Lease names "intruder"`, lost.Reason)
	assert.False(t, processAlive(oldMaster.PID), "its master is dead")
	require.Error(t, cl.serving(), "no master serves while the intruder holds the Lease")
	// Nobody writes the intruder's Lease: not the old leader's release, not a standby.
	time.Sleep(3 * leader.DefaultRetryPeriod)
	after, err := leaseOf(ctx, cl.c)
	require.NoError(t, err)
	assert.Equal(t, l.ResourceVersion, after.ResourceVersion, "the Lease is untouched: %+v", after.Spec)
	assert.Equal(t, "intruder", ptr.Deref(after.Spec.HolderIdentity, ""))
	cl.start(old)

	// The intruder releases the Lease the way client-go does: a standby takes it at its next
	// retry.
	after.Spec.HolderIdentity = ptr.To("")
	after.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	t1 := time.Now()
	require.NoError(t, cl.c.Update(ctx, after))
	lead := cl.awaitLeader(15*time.Second, "intruder")
	t.Logf("released by the intruder: %s serving after %s", lead.name, time.Since(t1).Round(time.Millisecond))
	_, err = poll(20*time.Second, func() error { return cl.capacityIs(segmentSize) })
	require.NoError(t, err)
	put := <-cl.putUntilOK("after-the-intruder", 30*time.Second)
	require.NoError(t, put.err)
	assert.Zero(t, cl.client.get(t, prevKey), "cold cache")
	require.NoError(t, cl.labels(lead, ""))
}

func median(s []sample, f func(sample) time.Duration) time.Duration {
	if len(s) == 0 {
		return 0
	}
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = f(x)
	}
	slices.Sort(d)
	return d[len(d)/2]
}

func stats(s []sample, f func(sample) time.Duration) string {
	if len(s) == 0 {
		return "-"
	}
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = f(x)
	}
	slices.Sort(d)
	r := func(x time.Duration) string { return x.Round(10 * time.Millisecond).String() }
	return r(d[0]) + " / " + r(d[len(d)/2]) + " / " + r(d[len(d)-1])
}

// heldThrough takes the API server away for apiAway, from every launcher ("api-away") or from
// the leader alone ("leader-cut"), and proves the serving master is kept: the same process and
// the same term on the Lease, every put during the outage succeeds, the key written before
// still reads back, and the leader renews the Lease itself once the API server answers. During
// "api-away" a launcher starts in a fourth Pod with its own path to the API server: the leader
// cannot acknowledge it (it cannot read its Pod), so it does not take over though client-go
// would. It returns a key written afterwards.
func (cl *haCluster) heldThrough(kind, prevKey string) string {
	t := cl.t
	t.Helper()
	ctx := t.Context()
	old, oldMaster, before := cl.steadyLeader()
	cut := []*leaderPod{old}
	if kind == "api-away" {
		cut = slices.Clone(cl.pods)
	}
	t0 := time.Now()
	for _, p := range cut {
		p.proxy.setCut(true)
	}
	var young *leaderPod
	if kind == "api-away" {
		time.Sleep(3 * time.Second)
		young = &leaderPod{name: generator.LeaderName(backendName) + "-young", ip: "127.0.0.14"}
		createLeaderPod(t, cl.c, cl.rendered, young.name, young.ip)
		cl.pods = append(cl.pods, young)
		cl.start(young)
	}
	var puts, failed int
	for i := 0; time.Since(t0) < apiAway; i++ {
		// Small objects: the tenant's quota holds what every step wrote, as the cache is kept.
		k := fmt.Sprintf("%s-during-%d", kind, i)
		rc, ok, err := cl.client.put(k, 64<<10)
		require.NoError(t, err)
		if ok {
			puts++
		} else {
			failed++
			t.Logf("%s: put %s failed with %d at %s", kind, k, rc, time.Since(t0).Round(time.Millisecond))
		}
		time.Sleep(500 * time.Millisecond)
	}
	back := time.Now()
	for _, p := range cut {
		p.proxy.setCut(false)
	}

	require.True(t, processAlive(oldMaster.PID), "%s: the serving master is kept:\n%s", kind, old.p.Output())
	_, lost := old.p.event("lost the Lease: killing the master")
	require.False(t, lost, "%s: the leader kept its term:\n%s", kind, old.p.Output())
	renewed, err := poll(20*time.Second, func() error {
		ev, ok := old.p.event("renewing the Lease again")
		if !ok || ev.at().Before(back) {
			return fmt.Errorf("%s has not renewed the Lease itself since the API server came back", old.name)
		}
		return nil
	})
	require.NoError(t, err)
	after, err := leaseOf(ctx, cl.c)
	require.NoError(t, err)
	assert.Equal(t, ptr.Deref(before.Spec.HolderIdentity, ""), ptr.Deref(after.Spec.HolderIdentity, ""), "the same holder")
	assert.Equal(t, ptr.Deref(before.Spec.LeaseTransitions, 0), ptr.Deref(after.Spec.LeaseTransitions, 0), "no transition")
	assert.True(t, before.Spec.AcquireTime.Equal(after.Spec.AcquireTime), "the same term: %s, then %s", before.Spec.AcquireTime, after.Spec.AcquireTime)
	require.NoError(t, cl.oneMaster(old))
	assert.Zero(t, failed, "%s: every put while the API server was away succeeded", kind)
	assert.Equal(t, payloadBytes, cl.client.get(t, prevKey), "%s: the key written before the outage reads back: the cache is kept", kind)

	// How the leader held, by its own account.
	want := map[string]string{
		"api-away":   "renewals fail here and every peer's too: holding the master on their promises",
		"leader-cut": "renewals fail here: a peer renews the Lease on this launcher's behalf",
	}[kind]
	held, ok := old.p.event(want)
	require.True(t, ok, "%s: the leader says %q:\n%s", kind, want, old.p.Output())
	assert.True(t, held.at().After(t0), "during the outage")
	t.Logf("%s: %s kept its master through %s without the API server (%d puts, %d failed); it holds from %s after the cut; renewing itself %s after the API server came back",
		kind, old.name, apiAway, puts, failed, held.at().Sub(t0).Round(time.Millisecond), renewed.Sub(back).Round(time.Millisecond))

	if young != nil {
		_, led := young.p.event("became leader")
		assert.False(t, led, "the launcher the leader never acknowledged did not take over:\n%s", young.p.Output())
		assert.Contains(t, young.p.Output(), "its term never acknowledged this launcher",
			"it wanted to (client-go saw the Lease unrenewed for its lease duration) and its gate refused")
		young.p.Signal(syscall.SIGTERM)
		assert.Equal(t, 0, young.p.Wait(t, 15*time.Second))
		cl.pods = slices.DeleteFunc(cl.pods, func(p *leaderPod) bool { return p == young })
		require.NoError(t, cl.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: young.name}}))
	}
	put := <-cl.putUntilOK(kind+"-after", 10*time.Second)
	require.NoError(t, put.err)
	return put.key
}
