package scale_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/backend"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

const (
	systemNamespace = "gpustack-system"
	podNamespace    = "scale-pods"
	// managerUser is the identity of `kvcache manager` (the separate process); inProcessUser
	// the in-process manager of the reachable-stores variant. Both are system:masters: RBAC
	// is not the subject here (test/chart proves it).
	managerUser   = "kvcache-scale-manager"
	inProcessUser = "kvcache-scale-inprocess"
	// resync is how often the backend, pool and Binding controllers requeue every object.
	resync = backend.DefaultPollInterval
)

// scaleConfig is the run's size and timing. The defaults are the figures; the
// KVCACHE_SCALE_* variables shrink or vary a run while working on it.
type scaleConfig struct {
	backends    int // one pool per backend
	tenants     int // tenant namespaces; one Binding per pool in each
	pods        int
	creators    int // concurrent creators of backends, pools and Bindings
	podCreators int
	// afterSettle is waited before the steady-state window (longer than a resync), window is
	// its length, afterPods the wait between the last Pod created and the RSS reading.
	afterSettle, window, afterPods time.Duration
	settleTimeout                  time.Duration
	// kubeconfigFlag runs the manager with --kubeconfig (client-go's default client-side rate
	// limit applies: 5 QPS, burst 10, per API resource); otherwise the kubeconfig is passed in
	// $KUBECONFIG, which controller-runtime loads with the limit off, as in a cluster.
	kubeconfigFlag bool
	// inProcess adds the variant with reachable (fake) stores.
	inProcess bool
	// stores is how the process manager fails to reach the stores: "dns" (their names do not
	// resolve here, as the issue describes) or "refused" (every admin call goes to a proxy port
	// nothing listens on: a fast, stable "connection refused", as a cluster whose leader
	// Services have no endpoints answers).
	stores string
	// earlyCreate creates the objects as soon as /readyz answers, before the controllers'
	// workers started (their caches still filling); by default the run waits for the workers.
	earlyCreate bool
	// churnWindow is the length of the window while usage moves (0: the usage refresh
	// interval, so that every object's refresh falls in it once).
	churnWindow time.Duration
}

// The environment varies a run: KVCACHE_SCALE_BACKENDS, KVCACHE_SCALE_PODS,
// KVCACHE_SCALE_SETTLE_TIMEOUT, KVCACHE_SCALE_AFTER_SETTLE, KVCACHE_SCALE_WINDOW,
// KVCACHE_SCALE_CHURN_WINDOW, KVCACHE_SCALE_KUBECONFIG=flag, KVCACHE_SCALE_STORES=refused,
// KVCACHE_SCALE_EARLY_CREATE=1,
// KVCACHE_SCALE_INPROCESS=0; and to look into one: KVCACHE_SCALE_WORKDIR (a directory kept
// after the run, with manager.log and audit.log) and KVCACHE_SCALE_MANAGER_ARGS (extra
// `kvcache manager` flags, e.g. --zap-log-level=5 --metrics-bind-address=127.0.0.1:8080).

func loadConfig(b *testing.B) scaleConfig {
	c := scaleConfig{
		backends: 100, tenants: 10, pods: 10000, creators: 4, podCreators: 8,
		afterSettle: 40 * time.Second, window: 30 * time.Second, afterPods: 10 * time.Second,
		settleTimeout: 4 * time.Minute, inProcess: true,
	}
	num := func(name string, p *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				b.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*p = n
		}
	}
	dur := func(name string, p *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				b.Fatalf("%s=%q: %v", name, v, err)
			}
			*p = d
		}
	}
	num("KVCACHE_SCALE_BACKENDS", &c.backends)
	num("KVCACHE_SCALE_PODS", &c.pods)
	dur("KVCACHE_SCALE_SETTLE_TIMEOUT", &c.settleTimeout)
	dur("KVCACHE_SCALE_AFTER_SETTLE", &c.afterSettle)
	dur("KVCACHE_SCALE_WINDOW", &c.window)
	dur("KVCACHE_SCALE_CHURN_WINDOW", &c.churnWindow)
	switch v := os.Getenv("KVCACHE_SCALE_KUBECONFIG"); v {
	case "", "env":
	case "flag":
		c.kubeconfigFlag = true
	default:
		b.Fatalf("KVCACHE_SCALE_KUBECONFIG=%q: env (default) or flag", v)
	}
	if os.Getenv("KVCACHE_SCALE_INPROCESS") == "0" {
		c.inProcess = false
	}
	switch c.stores = os.Getenv("KVCACHE_SCALE_STORES"); c.stores {
	case "":
		c.stores = "dns"
	case "dns", "refused":
	default:
		b.Fatalf("KVCACHE_SCALE_STORES=%q: dns (default) or refused", c.stores)
	}
	c.earlyCreate = os.Getenv("KVCACHE_SCALE_EARLY_CREATE") == "1"
	return c
}

// report collects the figures and prints them as one table at the end.
type report struct {
	mu    sync.Mutex
	rows  [][3]string
	notes []string
}

func (r *report) row(name, value, goal string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, [3]string{name, value, goal})
}

func (r *report) note(title string, lines ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, title)
	for _, l := range lines {
		r.notes = append(r.notes, "    "+l)
	}
}

func (r *report) String() string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tvalue\tgoal")
	fmt.Fprintln(tw, "------\t-----\t----")
	for _, row := range r.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row[0], row[1], row[2])
	}
	_ = tw.Flush()
	sb.WriteString("\n")
	for _, n := range r.notes {
		sb.WriteString(n + "\n")
	}
	return sb.String()
}

var start = time.Now()

// logf prints progress as the run goes (b.Log prints only at the end).
func logf(format string, args ...any) {
	fmt.Printf("scale %6.1fs: %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// BenchmarkScale is the scale run. Run it once:
//
//	KUBEBUILDER_ASSETS=$(hack/tools.sh assets) go test ./test/scale/ -run '^$' -bench Scale -benchtime 1x -v -timeout 20m
//
// The manager runs as a separate process (`kvcache manager`, built here, identity
// kvcache-scale-manager in system:masters) so its RSS is its own and the API server's audit log
// shows its requests alone. The stores' admin endpoints (<backend>-leader.gpustack-system.svc)
// do not resolve from that process, so its backends settle short of Ready and its pools at
// LedgerUnreachable; the in-process variant that follows (manager.New) points every backend at
// a fake master (storetest) and measures the same with the ledger reachable.
//
// The kubeconfig reaches the process in $KUBECONFIG by default, not --kubeconfig: the flag's
// path (clientcmd.BuildConfigFromFlags) leaves client-go's client-side limit of 5 QPS per API
// resource on, which a manager in a cluster (controller-runtime's GetConfig) does not have, and
// which alone makes the 2,000 Binding writes take ~400 s. KVCACHE_SCALE_KUBECONFIG=flag
// measures that path.
func BenchmarkScale(b *testing.B) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		b.Fatal("KUBEBUILDER_ASSETS is not set: this benchmark needs a real kube-apiserver and etcd; run `make tools`, then export KUBEBUILDER_ASSETS=$(hack/tools.sh assets)")
	}
	cfg := loadConfig(b)
	ctx := context.Background()
	rep := &report{}
	defer func() { b.Log("\n" + rep.String()) }()
	start = time.Now()
	dir := b.TempDir()
	if d := os.Getenv("KVCACHE_SCALE_WORKDIR"); d != "" { // keeps the logs and the audit log
		dir = d
		if err := os.MkdirAll(dir, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	// The in-process manager's log (JSON, as the binary writes it), read for its errors.
	inProcessLog, err := os.Create(filepath.Join(dir, "inprocess-manager.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { inProcessLog.Close() })
	ctrl.SetLogger(zap.New(zap.WriteTo(inProcessLog)))

	// The kvcache binary builds while the API server starts.
	var bin string
	built := make(chan error, 1)
	go func() {
		var err error
		bin, err = testenv.BuildKvcache(context.Background(), dir)
		built <- err
	}()

	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy(managerUser, inProcessUser)), 0o600); err != nil {
		b.Fatal(err)
	}
	env, err := testenv.Start(func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().
			Append("audit-policy-file", policy).
			Append("audit-log-path", auditLog).
			Append("audit-log-format", "json")
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	logf("envtest started")

	admin := env.Client
	for _, ns := range append([]string{systemNamespace, podNamespace}, tenants(cfg.tenants)...) {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
	for name, value := range kvv1.SettingCatalog() {
		if err := admin.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}); err != nil {
			b.Fatal(err)
		}
	}
	user, err := env.Environment().ControlPlane.AddUser(envtest.User{Name: managerUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "manager.kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := <-built; err != nil {
		b.Fatal(err)
	}
	logf("kvcache built")

	var storesEnv []string
	storesHow := "the stores' admin endpoints (<backend>-leader.gpustack-system.svc:9003) do not resolve here"
	if cfg.stores == "refused" {
		closed, err := freePort()
		if err != nil {
			b.Fatal(err)
		}
		// Only the admin calls go through it: Go never proxies loopback, where the API server is.
		storesEnv = []string{"HTTP_PROXY=http://127.0.0.1:" + strconv.Itoa(closed), "NO_PROXY="}
		storesHow = "every admin call goes to a proxy port nothing listens on (HTTP_PROXY): connection refused at once"
	}
	mgr, err := startManager(bin, dir, kubeconfig, cfg.kubeconfigFlag, systemNamespace, storesEnv, strings.Fields(os.Getenv("KVCACHE_SCALE_MANAGER_ARGS")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(mgr.stop)
	if err := mgr.waitReady(90 * time.Second); err != nil {
		b.Fatal(err)
	}
	if !cfg.earlyCreate {
		if err := mgr.waitWorkers(60*time.Second, "kvcachebackend", "kvcachepool"); err != nil {
			b.Fatal(err)
		}
	}
	idle, _ := readMem(mgr.pid())
	kubeconfigHow := "$KUBECONFIG (controller-runtime GetConfig: no client-side rate limit, as in a cluster)"
	if cfg.kubeconfigFlag {
		kubeconfigHow = "--kubeconfig (client-go default client-side limit: 5 QPS, burst 10, per API resource)"
	}
	logf("manager ready (pid %d, RSS %.1f MiB); kubeconfig via %s", mgr.pid(), idle.rssMiB(), kubeconfigHow)

	// 1. Create, and wait for every condition to settle.
	nBindings := cfg.backends * cfg.tenants
	t0 := time.Now()
	create := func(n int, f func(i int) client.Object) error {
		return parallel(n, cfg.creators, func(i int) error { return admin.Create(ctx, f(i)) })
	}
	if err := create(cfg.backends, func(i int) client.Object { return scaleBackend(i) }); err != nil {
		b.Fatal(err)
	}
	if err := create(cfg.backends, func(i int) client.Object { return scalePool(i) }); err != nil {
		b.Fatal(err)
	}
	if err := create(nBindings, func(k int) client.Object { return scaleBinding(k/cfg.tenants, k%cfg.tenants) }); err != nil {
		b.Fatal(err)
	}
	created := time.Since(t0)
	logf("created %d backends, %d pools, %d Bindings in %s", cfg.backends, cfg.backends, nBindings, secs(created))

	p, settleAt, ok := waitSettled(ctx, admin, cfg, nil, t0, mgr.exited, mgr.logTail)
	settle := settleAt.total
	rssSettled, _ := readMem(mgr.pid())
	cpuSettle := cpuSeconds(mgr.pid())
	rep.row("objects", fmt.Sprintf("%d backends, %d pools, %d Bindings in %d tenant namespaces", cfg.backends, cfg.backends, nBindings, cfg.tenants), "")
	rep.row("manager kubeconfig", kubeconfigHow, "")
	rep.row("stores (process manager)", storesHow, "")
	if cfg.earlyCreate {
		rep.row("created", "as soon as /readyz answered, before the controllers' workers started", "")
	} else {
		rep.row("created", "once the controllers' workers started (caches synced)", "")
	}
	rep.row(fmt.Sprintf("create (%d client goroutines)", cfg.creators), secs(created), "")
	if ok {
		rep.row("time to all conditions settled", secs(settle), "")
	} else {
		rep.row("time to all conditions settled", fmt.Sprintf("NOT SETTLED after %s: %d/%d backends, %d/%d pools, %d/%d Bindings", secs(settle), p.backends, cfg.backends, p.pools, cfg.backends, p.bindings, nBindings), "")
	}
	rep.row("  all backends settled", settleAt.of(settleAt.backends), "")
	rep.row("  all pools settled", settleAt.of(settleAt.pools), "")
	rep.row("  all Bindings settled", settleAt.of(settleAt.bindings), "")
	rep.row("  manager CPU from its start to settled", fmt.Sprintf("%.1f s", cpuSettle), "")
	if cfg.stores == "dns" {
		rep.note("note: with stores=dns the unreachable-store error text is whatever the resolver answers (NXDOMAIN, or a timeout when the resolver throttles); KVCACHE_SCALE_STORES=refused gives a fast, stable error.")
	}
	rep.note("settled state (process manager; "+storesHow+", so backends stay short of Ready and pools at LedgerUnreachable, as expected):",
		"backends phase/LeaderAvailable: "+fmt.Sprint(p.backendPhases),
		"pools phase/QuotaLedgerAvailable: "+fmt.Sprint(p.poolReasons),
		"Bindings phase/QuotaGranted: "+fmt.Sprint(p.bindingReasons))
	logf("settled=%v in %s: %v %v %v", ok, secs(settle), p.backendPhases, p.poolReasons, p.bindingReasons)

	// 2. Steady state: one full resync after settling, then count the manager's writes.
	logf("waiting %s (> one %s resync) before the steady-state window", cfg.afterSettle, resync)
	time.Sleep(cfg.afterSettle)
	if mgr.exited() {
		b.Fatalf("the manager exited: %v\n%s", mgr.err, mgr.logTail(3000))
	}
	steady := measureSteady(ctx, b, env.Config, auditLog, managerUser, cfg.window, func() float64 { return cpuSeconds(mgr.pid()) }, nil)
	steady.report(rep, "process")
	logf("steady state: %d writes in %s (%.1f per resync)", len(steady.writes), cfg.window, steady.perResync)

	// 3. RSS with 10,000 unlabelled Pods.
	before, _ := readMem(mgr.pid())
	podClient := unthrottled(b, env.Config)
	t1 := time.Now()
	if err := parallel(cfg.pods, cfg.podCreators, func(i int) error { return podClient.Create(ctx, unlabelledPod(podNamespace, i)) }); err != nil {
		b.Fatal(err)
	}
	podsCreated := time.Since(t1)
	logf("created %d Pods in %s; waiting %s", cfg.pods, secs(podsCreated), cfg.afterPods)
	time.Sleep(cfg.afterPods)
	after, _ := readMem(mgr.pid())
	goalRSS := "<= 100 MiB"
	if after.rssMiB() > 100 {
		goalRSS += " (MISSED)"
	} else {
		goalRSS += " (met)"
	}
	rep.row("manager RSS idle (caches synced, no objects)", idle.String(), "")
	rep.row("manager RSS settled", rssSettled.String(), "")
	rep.row("manager RSS after the steady window", before.String(), "")
	rep.row(fmt.Sprintf("manager RSS %s after %d unlabelled Pods", cfg.afterPods, cfg.pods), fmt.Sprintf("%s, delta %+.1f MiB", after, after.rssMiB()-before.rssMiB()), goalRSS)
	rep.row("manager peak RSS (VmHWM, whole run)", fmt.Sprintf("%.1f MiB", after.hwmMiB()), "")
	rep.row(fmt.Sprintf("create %d Pods (%d goroutines)", cfg.pods, cfg.podCreators), secs(podsCreated), "")
	events, err := readAudit(auditLog, managerUser)
	if err != nil {
		b.Fatal(err)
	}
	n, unselected, scopes := podListWatches(events)
	goalScope := "every one by label selector (the stores' in gpustack-system, opted-in and ModelDeployment Pods elsewhere)"
	if unselected > 0 {
		goalScope += " (MISSED)"
	} else {
		goalScope += " (met)"
	}
	rep.row("manager LIST/WATCH requests on pods (whole run)", fmt.Sprintf("%d, %d without a label selector", n, unselected), goalScope)
	rep.note("the manager's pod LIST/WATCH requests (whole run):", scopes...)
	duringPods := between(events, t1, time.Now())
	rep.note(fmt.Sprintf("the manager's requests while the Pods were created and %s after (%d):", cfg.afterPods, len(duringPods)),
		countBy(duringPods, func(e auditEvent) string { return e.Verb + " " + e.resource() })...)
	nErr, errs := logErrors(mgr.log)
	rep.note(fmt.Sprintf("process manager log: %d error line(s)", nErr), errs...)
	mgr.stop()
	logf("manager stopped; RSS with Pods %.1f MiB", after.rssMiB())

	b.ReportMetric(settle.Seconds(), "settle-seconds")
	b.ReportMetric(steady.perResync, "writes-per-resync")
	b.ReportMetric(after.rssMiB(), "rss-mib")

	// 4. The variant with reachable stores: the same objects, an in-process manager whose
	// backends' admin addresses are fake masters on loopback.
	if cfg.inProcess {
		inProcessVariant(ctx, b, env, cfg, auditLog, rep, inProcessLog.Name())
	}
	if !ok {
		b.Errorf("the process manager's objects did not settle within %s", cfg.settleTimeout)
	}
}

func tenants(n int) []string {
	out := make([]string, n)
	for j := range out {
		out[j] = tenantNS(j)
	}
	return out
}

// unthrottled is a client for the benchmark's own bulk creates.
func unthrottled(b *testing.B, cfg *rest.Config) client.Client {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	s, err := generator.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	cl, err := client.New(c, client.Options{Scheme: s})
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// settleTimes are when each kind (and everything) settled, from the first create.
type settleTimes struct{ backends, pools, bindings, total time.Duration }

func (st settleTimes) of(d time.Duration) string {
	if d == 0 {
		return "not settled"
	}
	return secs(d)
}

// waitSettled polls with List once a second until every object settled (see settled), the
// manager exits, or the timeout.
func waitSettled(ctx context.Context, c client.Client, cfg scaleConfig, when func(*settledCheck), t0 time.Time, exited func() bool, logTail func(int) string) (progress, settleTimes, bool) {
	var st settleTimes
	nBindings := cfg.backends * cfg.tenants
	deadline := t0.Add(cfg.settleTimeout)
	var p progress
	lastLog := time.Now()
	for {
		var err error
		p, err = settled(ctx, c, when)
		now := time.Since(t0)
		if err == nil {
			if st.backends == 0 && p.backends == cfg.backends {
				st.backends = now
			}
			if st.pools == 0 && p.pools == cfg.backends {
				st.pools = now
			}
			if st.bindings == 0 && p.bindings == nBindings {
				st.bindings = now
			}
			if p.backends == cfg.backends && p.pools == cfg.backends && p.bindings == nBindings {
				st.total = now
				return p, st, true
			}
		}
		if time.Since(lastLog) > 15*time.Second {
			logf("settling: %d/%d backends, %d/%d pools, %d/%d Bindings (%v)", p.backends, cfg.backends, p.pools, cfg.backends, p.bindings, nBindings, err)
			lastLog = time.Now()
		}
		if exited != nil && exited() {
			logf("the manager exited:\n%s", logTail(3000))
			st.total = now
			return p, st, false
		}
		if time.Now().After(deadline) {
			st.total = now
			return p, st, false
		}
		time.Sleep(time.Second)
	}
}

// steadyResult is what one steady-state window showed.
type steadyResult struct {
	window    time.Duration
	requests  []auditEvent
	writes    []auditEvent
	perResync float64
	cpu       float64
	changes   []change
	ledger    int // ledger writes (PUT/DELETE) the fake masters received, -1 when not observed
}

// measureSteady counts the user's requests over the window from the audit log, records what
// changed in the tracked objects meanwhile, and the CPU the manager used.
func measureSteady(ctx context.Context, b *testing.B, cfg *rest.Config, auditLog, user string, window time.Duration, cpu func() float64, fakes []*storetest.Fake) steadyResult {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rec, err := recordChanges(ctx, dyn)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fakes {
		f.ResetRequests()
	}
	from := time.Now()
	cpu0 := cpu()
	time.Sleep(window)
	to := time.Now()
	cpu1 := cpu()
	changes := rec.stop()
	// The audit log is written synchronously; give the last request of the window a moment.
	time.Sleep(500 * time.Millisecond)
	events, err := readAudit(auditLog, user)
	if err != nil {
		b.Fatal(err)
	}
	r := steadyResult{window: window, requests: between(events, from, to), cpu: cpu1 - cpu0, changes: changes, ledger: -1}
	for _, e := range r.requests {
		if e.isWrite() {
			r.writes = append(r.writes, e)
		}
	}
	r.perResync = float64(len(r.writes)) / (window.Seconds() / resync.Seconds())
	if fakes != nil {
		r.ledger = 0
		for _, f := range fakes {
			for _, req := range f.Requests() {
				if strings.HasPrefix(req, "PUT ") || strings.HasPrefix(req, "DELETE ") {
					r.ledger++
				}
			}
		}
	}
	return r
}

func (r steadyResult) report(rep *report, who string) {
	goal := "0"
	if len(r.writes) > 0 {
		goal += " (MISSED)"
	} else {
		goal += " (met)"
	}
	resyncs := r.window.Seconds() / resync.Seconds()
	rep.row(fmt.Sprintf("%s: API writes in steady state", who), fmt.Sprintf("%d in %s = %.1f per %s resync", len(r.writes), r.window, r.perResync, resync), goal)
	rep.row(fmt.Sprintf("%s: API requests in steady state (all verbs)", who), fmt.Sprintf("%d in %s", len(r.requests), r.window), "")
	rep.row(fmt.Sprintf("%s: CPU per resync", who), fmt.Sprintf("%.2f s", r.cpu/resyncs), "")
	if r.ledger >= 0 {
		g := "0 (met)"
		if r.ledger > 0 {
			g = "0 (MISSED)"
		}
		rep.row(fmt.Sprintf("%s: ledger writes (PUT/DELETE) in steady state", who), fmt.Sprint(r.ledger), g)
	}
	rep.note(fmt.Sprintf("%s: requests in the steady window by verb and resource:", who), countBy(r.requests, func(e auditEvent) string { return e.Verb + " " + e.resource() })...)
	if len(r.writes) > 0 {
		rep.note(fmt.Sprintf("%s: the writes by verb, resource and object (first 20):", who), first(countBy(r.writes, func(e auditEvent) string {
			return fmt.Sprintf("%s %s %s (HTTP %d)", e.Verb, e.resource(), e.object(), e.ResponseStatus.Code)
		}), 20)...)
		rep.note(fmt.Sprintf("%s: what changed in the tracked objects during the window, grouped by the fields that changed:", who), explain(r.changes)...)
	}
}

// reportChurn reports a window while usage moves: the writes per resync against what writing
// every moved figure on every poll would make (every backend, pool and Binding each resync).
func (r steadyResult) reportChurn(rep *report, who string, backends, bindings int) {
	resyncs := r.window.Seconds() / resync.Seconds()
	objects := 2*backends + bindings
	rep.row(fmt.Sprintf("%s: API writes", who), fmt.Sprintf("%d in %s = %.1f per %s resync", len(r.writes), r.window, r.perResync, resync),
		fmt.Sprintf("< %d per resync (every backend, pool and Binding on every poll)", objects))
	changed := 0
	for _, c := range r.changes {
		if len(c.diff) > 0 {
			changed++
		}
	}
	rep.row(fmt.Sprintf("%s: objects changed (resourceVersion moved)", who), fmt.Sprintf("%d in %s = %.1f per resync", changed, r.window, float64(changed)/resyncs), "")
	rep.row(fmt.Sprintf("%s: CPU per resync", who), fmt.Sprintf("%.2f s", r.cpu/resyncs), "")
	rep.note(fmt.Sprintf("%s: the writes by verb and resource:", who), countBy(r.writes, func(e auditEvent) string { return e.Verb + " " + e.resource() })...)
	rep.note(fmt.Sprintf("%s: what changed, grouped by the fields that changed:", who), first(explain(r.changes), 24)...)
}

// churnUsage makes every tenant on every fake master hold a different number of bytes every
// second, as engines writing would; the returned func stops it.
func churnUsage(fakes []*storetest.Fake, tenants int) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for n := int64(1); ; n++ {
			for _, f := range fakes {
				for j := range tenants {
					f.SetCharged(fmt.Sprintf("%s-chat", tenantNS(j)), (n+int64(j))<<12)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// waitUsage waits until n Bindings show a non-zero usage.
func waitUsage(ctx context.Context, c client.Client, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		l := &kvv1.KVCachePoolBindingList{}
		if err := c.List(ctx, l); err != nil {
			return err
		}
		with := 0
		for _, b := range l.Items {
			if b.Status.Usage != nil && !b.Status.Usage.IsZero() {
				with++
			}
		}
		if with >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Bindings show usage", with, n)
		}
		time.Sleep(time.Second)
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

// inProcessVariant stops nothing the process run left: the same objects are reconciled by an
// in-process manager (manager.New) whose backends' admin endpoints are fake masters
// (storetest), each with 16Gi mounted, so ledgers are read and written and Bindings granted.
func inProcessVariant(ctx context.Context, b *testing.B, env *testenv.Env, cfg scaleConfig, auditLog string, rep *report, logPath string) {
	fakes := make([]*storetest.Fake, cfg.backends)
	addr := map[string]string{}
	for i := range fakes {
		f := storetest.NewFake(storetest.FakeOptions{MultiTenancy: true})
		f.MountSegment(fmt.Sprintf("10.%d.%d.10:15400", 100+i/250, i%250), 16<<30, "tcp")
		fakes[i] = f
		addr[backendName(i)] = strings.TrimPrefix(f.URL(), "http://")
	}
	b.Cleanup(func() {
		for _, f := range fakes {
			f.Close()
		}
	})
	user, err := env.Environment().ControlPlane.AddUser(envtest.User{Name: inProcessUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	mcfg := rest.CopyConfig(user.Config())
	mcfg.QPS, mcfg.Burst = -1, 0 // as `kvcache manager` in a cluster (controller-runtime GetConfig)
	mgr, err := manager.New(mcfg, manager.Options{
		SystemNamespace: systemNamespace, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		AdminAddress: func(b *kvv1.KVCacheBackend) string {
			if a, ok := addr[b.Name]; ok {
				return a
			}
			return "127.0.0.1:1"
		},
		DisableWebhooks: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- mgr.Start(mctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				logf("the in-process manager stopped with: %v", err)
			}
		}
	}
	b.Cleanup(stop)
	logf("in-process manager started with %d fake masters", len(fakes))

	exited := func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
			return false
		}
	}
	p, st, ok := waitSettled(ctx, env.Client, cfg, func(c *settledCheck) {
		c.backend = func(b *kvv1.KVCacheBackend) bool {
			return b.Status.ObservedGeneration == b.Generation && b.Status.Phase != "" &&
				reason(b.Status.Conditions, kvv1.ConditionLeaderAvailable) == "Serving"
		}
		c.pool = func(p *kvv1.KVCachePool) bool {
			return reason(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable) == "LedgerObserved"
		}
		c.binding = func(b *kvv1.KVCachePoolBinding) bool {
			return reason(b.Status.Conditions, kvv1.ConditionQuotaGranted) == "Granted"
		}
	}, t0, exited, func(int) string { return "" })
	nBindings := cfg.backends * cfg.tenants
	if ok {
		rep.row("in-process: from start to settled (Serving, LedgerObserved, Granted)", secs(st.total), "")
	} else {
		rep.row("in-process: from start to settled", fmt.Sprintf("NOT SETTLED after %s: %d/%d backends, %d/%d pools, %d/%d Bindings", secs(st.total), p.backends, cfg.backends, p.pools, cfg.backends, p.bindings, nBindings), "")
	}
	rep.note("settled state (in-process manager, fake masters with 16Gi mounted each, no member Pods):",
		"backends phase/LeaderAvailable: "+fmt.Sprint(p.backendPhases),
		"pools phase/QuotaLedgerAvailable: "+fmt.Sprint(p.poolReasons),
		"Bindings phase/QuotaGranted: "+fmt.Sprint(p.bindingReasons))
	logf("in-process settled=%v in %s: %v %v %v", ok, secs(st.total), p.backendPhases, p.poolReasons, p.bindingReasons)
	wait := cfg.afterSettle / 2 // 20 s: still more than one resync, to keep the run short
	logf("waiting %s before the in-process steady-state window", wait)
	time.Sleep(wait)
	steady := measureSteady(ctx, b, env.Config, auditLog, inProcessUser, cfg.window, processCPU, fakes)
	steady.report(rep, "in-process")
	logf("in-process steady state: %d writes in %s (%.1f per resync), %d ledger writes", len(steady.writes), cfg.window, steady.perResync, steady.ledger)

	// Real traffic: every tenant's usage moves every second (an engine writing), so every
	// poll of every store reads new figures. Usage is written at once when it first appears,
	// then at most every refresh interval (operator.DefaultUsageRefresh): the window is that
	// long, so each object's refresh falls in it once.
	stopChurn := churnUsage(fakes, cfg.tenants)
	churnStart := time.Now()
	if err := waitUsage(ctx, env.Client, cfg.backends*cfg.tenants, cfg.settleTimeout); err != nil {
		logf("in-process: usage did not appear everywhere: %v", err)
		rep.row("in-process, usage moving: first usage written everywhere", "NOT within "+secs(cfg.settleTimeout)+": "+err.Error(), "")
	} else {
		rep.row("in-process, usage moving: first usage written everywhere", secs(time.Since(churnStart)), "")
	}
	time.Sleep(resync) // the last first-writes land before the window opens
	churnWindow := operator.DefaultUsageRefresh
	if cfg.churnWindow > 0 {
		churnWindow = cfg.churnWindow
	}
	logf("in-process: usage moving every second; measuring a %s window (the usage refresh interval is %s)", churnWindow, operator.DefaultUsageRefresh)
	churn := measureSteady(ctx, b, env.Config, auditLog, inProcessUser, churnWindow, processCPU, fakes)
	stopChurn()
	churn.reportChurn(rep, "in-process, usage moving every second", cfg.backends, cfg.backends*cfg.tenants)
	logf("in-process, usage moving: %d writes in %s (%.1f per resync)", len(churn.writes), churnWindow, churn.perResync)

	nErr, errs := logErrors(logPath) // before the stop, whose cancelled reconciles log errors
	rep.note(fmt.Sprintf("in-process manager log: %d error line(s)", nErr), errs...)
	rep.note("in-process: CPU per resync is the benchmark process's (the manager, 100 fake masters, and the window's watches).")
	stop()
	if !ok {
		b.Errorf("the in-process manager's objects did not settle within %s", cfg.settleTimeout)
	}
}

// processCPU is this process's CPU time (the in-process manager's, plus the benchmark's own
// little work during a window).
func processCPU() float64 { return cpuSeconds(os.Getpid()) }
