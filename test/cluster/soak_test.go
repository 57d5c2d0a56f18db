package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
)

// TestSoak runs the walkthrough's store (three leader replicas) under load and faults for
// SOAK_DURATION (5 minutes unless set; `make soak` runs an hour). The load: opted-in vLLM and
// SGLang stand-ins created and deleted in several namespaces, each writing and reading back
// under its tenant; unlabelled Pods at a higher rate; the ModelDeployment scaled up and down;
// Bindings created and deleted; creates that must be refused. The faults: each kind once in
// turn, then in overlapping pairs while time remains; a run of 40 minutes or more ends with
// 15 minutes under load alone, long enough for a manager to live and its growth to be
// judged (the faults replace the managers every few minutes). Every invariant is checked as the
// run goes and at its end; any breach fails the test, naming it. The report (a table per fault
// kind) is written to SOAK_OUT (a new directory under the system's temporary one unless set).
func TestSoak(t *testing.T) {
	cfg := soakSettings(t)
	w := newWalk(t)
	t.Cleanup(func() { w.cleanup(t) })
	w.step(t, "helm install --wait with the default values", w.install)
	w.step(t, "the walkthrough applied", w.apply)
	w.step(t, "three leader replicas", w.scaleLeader)

	s := newSoak(t, w, cfg)
	t.Cleanup(s.close)
	w.step(t, "the soak's namespaces and Bindings", s.prepare)
	s.run()
	report := s.report()
	t.Logf("soak report (%s):\n%s", filepath.Join(cfg.out, "report.md"), report)
	for _, b := range s.breaches {
		t.Errorf("breach of invariant %s at +%s: %s", b.invariant, b.at.Sub(s.t0).Round(time.Second), b.what)
	}
}

type soakConfig struct {
	duration time.Duration
	steady   time.Duration // the last stretch of duration: load, no faults
	out      string
}

// A run of steadyFrom or more ends with steadyStretch of load alone: the life a manager needs to
// be judged (judgedLife) with a margin, so the replica born in the last fault reaches it.
const (
	steadyFrom    = 40 * time.Minute
	steadyStretch = judgedLife + 3*time.Minute
)

func soakSettings(t *testing.T) soakConfig {
	t.Helper()
	cfg := soakConfig{duration: 5 * time.Minute, out: os.Getenv("SOAK_OUT")}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "SOAK_DURATION=%q: write a Go duration such as 60m", v)
		require.GreaterOrEqual(t, d, time.Minute, "SOAK_DURATION=%q: at least 1m", v)
		cfg.duration = d
	}
	if cfg.duration >= steadyFrom {
		cfg.steady = steadyStretch
	}
	if cfg.out == "" {
		cfg.out = filepath.Join(os.TempDir(), "kvcache-soak-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(cfg.out, "logs"), 0o755), "SOAK_OUT")
	return cfg
}

// breach is one invariant found broken.
type breach struct {
	at        time.Time
	invariant string
	what      string
}

// window is one fault's run: from its first action until the store settled again.
type window struct {
	kind      string
	start     time.Time
	end       time.Time                  // settled (zero while it runs)
	capacity  time.Duration              // to the backend Ready with full capacity again
	lostBytes bool                       // the status reported the serving master started cold
	kept      string                     // what the probe read back after it: "kept/N", or why not
	planned   []func(p *corev1.Pod) bool // containers of ours this fault may restart
}

func (w *window) covers(at time.Time, slack time.Duration) bool {
	end := w.end
	if end.IsZero() {
		end = time.Now()
	}
	return !at.Before(w.start.Add(-slack)) && !at.After(end.Add(slack))
}

// round is one put-and-get a stand-in logged.
type round struct {
	at    time.Time
	ok    bool
	wrong bool // the get returned bytes other than the key's own
	put   float64
}

// engineRun is one opted-in Pod the load created, with the rounds read from its log.
type engineRun struct {
	namespace, name, engine string
	created, deleted        time.Time
	rounds                  []round
}

// refusal is a create the API server answered with an error.
type refusal struct {
	at      time.Time
	what    string // the load that tried it
	message string
}

type soak struct {
	t      *testing.T
	w      *walk
	cfg    soakConfig
	ctx    context.Context
	cancel context.CancelFunc
	t0     time.Time
	wg     sync.WaitGroup // the watchers
	loadWG sync.WaitGroup // the load's loops
	events *os.File

	mu         sync.Mutex
	breaches   []breach
	windows    []*window
	engines    []*engineRun
	refusals   []refusal
	unlabelled struct{ created, failed int }
	mdScaled   int
	churned    int
	samples    map[string][]procSample // manager container -> samples
	restarts   []restartSeen
	drifted    map[string]string // Pod -> reason it was counted drifted
	checks     int
	noManager  [][2]time.Time // while no manager replica ran
	probe      *soakProbe
	injector   *injection.Injector // one parse of the templates for every check
	loadStop   chan struct{}       // closed when the load is to finish what it holds
}

func newSoak(t *testing.T, w *walk, cfg soakConfig) *soak {
	ctx, cancel := context.WithCancel(context.Background())
	f, err := os.Create(filepath.Join(cfg.out, "events.jsonl"))
	require.NoError(t, err)
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	return &soak{t: t, w: w, cfg: cfg, ctx: ctx, cancel: cancel, events: f, injector: injection.New(r),
		loadStop: make(chan struct{}), samples: map[string][]procSample{}, drifted: map[string]string{}}
}

// close stops what still runs and deletes what the soak created (its Pods, its Bindings), so
// that the walkthrough's cleanup can uninstall the release.
func (s *soak) close() {
	s.cancel()
	s.loadWG.Wait()
	s.wg.Wait()
	_ = s.events.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ns := range []string{bindingNS, soakBound, soakChurn + "0", soakChurn + "1"} {
		_ = env.client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{LabelSelector: "kvcache-soak"})
		var l kvv1.KVCachePoolBindingList
		if err := env.kube.List(ctx, &l, client.InNamespace(ns)); err == nil {
			for i := range l.Items {
				if ns != bindingNS {
					_ = env.kube.Delete(ctx, &l.Items[i])
				}
			}
		}
	}
	for ctx.Err() == nil {
		var l kvv1.KVCachePoolBindingList
		if err := env.kube.List(ctx, &l); err == nil && len(l.Items) <= 1 {
			return
		}
		time.Sleep(time.Second)
	}
}

// event appends one line to events.jsonl (the run's timeline) and the test log.
func (s *soak) event(kind string, fields map[string]any) {
	line := map[string]any{"at": time.Now().UTC().Format(time.RFC3339Nano), "event": kind}
	for k, v := range fields {
		line[k] = v
	}
	b, _ := json.Marshal(line)
	s.mu.Lock()
	_, _ = s.events.Write(append(b, '\n'))
	s.mu.Unlock()
	s.t.Logf("soak +%s %s %v", time.Since(s.t0).Round(time.Second), kind, fields)
}

func (s *soak) breach(invariant, format string, args ...any) {
	b := breach{at: time.Now(), invariant: invariant, what: fmt.Sprintf(format, args...)}
	s.mu.Lock()
	s.breaches = append(s.breaches, b)
	s.mu.Unlock()
	s.event("breach", map[string]any{"invariant": invariant, "what": b.what})
}

// active is the fault window at, if any.
func (s *soak) active(at time.Time, slack time.Duration) *window {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.windows {
		if w.covers(at, slack) {
			return w
		}
	}
	return nil
}

// spawnLoad runs one of the load's loops.
func (s *soak) spawnLoad(fn func()) {
	s.loadWG.Add(1)
	go func() {
		defer s.loadWG.Done()
		fn()
	}()
}

// spawn runs a watcher until the soak's context ends.
func (s *soak) spawn(fn func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
}

// sleep waits d or until the soak ends, and says whether it should go on.
func (s *soak) sleep(d time.Duration) bool {
	select {
	case <-s.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// run starts the load and the watchers, runs the fault schedule, then stops the load and
// checks the end state.
func (s *soak) run() {
	s.t0 = time.Now()
	s.event("start", map[string]any{"duration": s.cfg.duration.String(), "out": s.cfg.out})
	s.startWatchers()
	probe, err := s.startSoakProbe()
	if err != nil {
		s.breach("3 settle", "the probe: %v", err)
	}
	s.probe = probe
	s.startLoad()
	// The load's first engines come up before the first fault.
	s.sleep(45 * time.Second)
	s.schedule(s.t0.Add(s.cfg.duration - s.cfg.steady))
	if s.cfg.steady > 0 {
		// From the last fault's settling, however late it ran.
		s.event("steady", map[string]any{"for": s.cfg.steady.String()})
		s.sleep(s.cfg.steady)
	}
	s.event("load stopping", nil)
	s.stopLoad()
	s.loadWG.Wait()
	s.finalChecks()
	s.cancel()
	s.wg.Wait()
	s.event("end", map[string]any{"took": time.Since(s.t0).Round(time.Second).String()})
}

// report writes the table per fault kind and the growth figures, to report.md and back.
func (s *soak) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak: %s of load (faults until %s before its end), %s in all\n\n", s.cfg.duration, s.cfg.steady, time.Since(s.t0).Round(time.Second))
	fmt.Fprintf(&b, "| fault | runs | to a successful write (median / worst) | to full capacity (median / worst) | writes failed | admissions refused | status said cold | probe objects kept |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	kinds := map[string][]*window{}
	var order []string
	for _, w := range s.windows {
		if _, ok := kinds[w.kind]; !ok {
			order = append(order, w.kind)
		}
		kinds[w.kind] = append(kinds[w.kind], w)
	}
	for _, k := range order {
		var toWrite, toCap stats
		failed, refused, cold := 0, 0, 0
		var kept []string
		for _, w := range kinds[k] {
			kept = append(kept, w.kept)
			rec, f := s.writeRecovery(w)
			toWrite = append(toWrite, rec)
			toCap = append(toCap, w.capacity)
			failed += f
			refused += s.refusedIn(w)
			if w.lostBytes {
				cold++
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %s / %s | %s / %s | %d | %d | %d of %d | %s |\n", k, len(kinds[k]),
			short(toWrite.median()), short(slices.Max(toWrite)), short(toCap.median()), short(slices.Max(toCap)), failed, refused, cold, len(kinds[k]), strings.Join(kept, ", "))
	}
	rounds, failed, wrong := 0, 0, 0
	for _, e := range s.engines {
		for _, r := range e.rounds {
			rounds++
			if !r.ok {
				failed++
			}
			if r.wrong {
				wrong++
			}
		}
	}
	fmt.Fprintf(&b, "\nLoad: %d opted-in stand-ins (%d put-and-get rounds, %d failed, %d wrong bytes), %d unlabelled Pods (%d creates failed), %d ModelDeployment scalings, %d Binding create/delete cycles, %d refusals, %d injection checks.\n",
		len(s.engines), rounds, failed, wrong, s.unlabelled.created, s.unlabelled.failed, s.mdScaled, s.churned, len(s.refusals), s.checks)
	b.WriteString("\nManager processes (one line per container run):\n\n")
	b.WriteString(s.growth())
	if len(s.drifted) > 0 {
		b.WriteString("\nCounted drifted:\n")
		keys := make([]string, 0, len(s.drifted))
		for k := range s.drifted {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "- %s: %s\n", k, s.drifted[k])
		}
	}
	if len(s.restarts) > 0 {
		b.WriteString("\nContainer restarts of ours:\n")
		for _, r := range s.restarts {
			fmt.Fprintf(&b, "- +%s %s (%s)\n", r.at.Sub(s.t0).Round(time.Second), r.container, r.why)
		}
	}
	fmt.Fprintf(&b, "\nBreaches: %d\n", len(s.breaches))
	for _, br := range s.breaches {
		fmt.Fprintf(&b, "- +%s %s: %s\n", br.at.Sub(s.t0).Round(time.Second), br.invariant, br.what)
	}
	_ = os.WriteFile(filepath.Join(s.cfg.out, "report.md"), []byte(b.String()), 0o644)
	return b.String()
}

func short(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.Round(100 * time.Millisecond).String()
}

// metaNow is a metav1.Time for log queries.
func metaNow(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }
