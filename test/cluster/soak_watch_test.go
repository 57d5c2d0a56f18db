package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// procSample is one reading of a manager process's own metrics.
type procSample struct {
	at         time.Time
	rss        float64 // bytes
	goroutines float64
}

// restartSeen is a container of ours whose restart count went up.
type restartSeen struct {
	at        time.Time
	container string
	why       string
	planned   bool
}

func (s *soak) startWatchers() {
	s.spawn(s.watchRestarts)
	s.spawn(s.sampleManagers)
	s.spawn(func() {
		for s.sleep(30 * time.Second) {
			s.collectLogs()
		}
	})
	s.spawn(func() {
		for s.sleep(30 * time.Second) {
			s.checkInjection()
		}
	})
}

// watchRestarts reads the restart counts of every container in the manager's and the stores'
// namespaces every 5 s; a restart no running fault planned is a breach.
func (s *soak) watchRestarts() {
	seen := map[string]int32{}
	for s.sleep(5 * time.Second) {
		for _, ns := range []string{releaseNS, systemNS} {
			l, err := env.client.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for i := range l.Items {
				p := &l.Items[i]
				// Init containers run again whenever a sandbox is made again: the containers'
				// own restarts say what happened.
				for _, c := range p.Status.ContainerStatuses {
					key := string(p.UID) + "/" + c.Name
					before, known := seen[key]
					seen[key] = c.RestartCount
					if !known || c.RestartCount <= before {
						continue
					}
					why := "running"
					at := time.Now()
					// Judged at when the container ended, not when the restart was seen: a
					// container in back-off restarts well after the fault that killed it.
					ended := at
					if t := c.LastTerminationState.Terminated; t != nil {
						why = fmt.Sprintf("%s, exit code %d, at %s", t.Reason, t.ExitCode, t.FinishedAt.UTC().Format(time.TimeOnly))
						if !t.FinishedAt.IsZero() {
							ended = t.FinishedAt.Time
						}
					}
					planned := s.plannedRestart(p, ended)
					r := restartSeen{at: at, container: ns + "/" + p.Name + "/" + c.Name, why: why, planned: planned}
					s.mu.Lock()
					s.restarts = append(s.restarts, r)
					s.mu.Unlock()
					s.savePrevious(p, c.Name)
					if !planned {
						s.breach("5 restarts", "container %s restarted outside a planned fault (%s)", r.container, why)
					}
				}
			}
		}
	}
}

func (s *soak) plannedRestart(p *corev1.Pod, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.windows {
		if !w.covers(at, 15*time.Second) {
			continue
		}
		for _, m := range w.planned {
			if m(p) {
				return true
			}
		}
	}
	return false
}

// savePrevious keeps the log of a container that restarted, for the post-mortem and the
// repetition check.
func (s *soak) savePrevious(p *corev1.Pod, container string) {
	raw, err := env.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: true, Timestamps: true}).DoRaw(context.Background())
	if err != nil {
		return
	}
	name := fmt.Sprintf("%s_%s_%s.previous-%d.log", p.Namespace, p.Name, container, time.Now().Unix())
	_ = os.WriteFile(filepath.Join(s.cfg.out, "logs", name), raw, 0o644)
}

// sampleManagers reads each manager replica's resident memory and goroutines every 20 s.
func (s *soak) sampleManagers() {
	hc := http.Client{Timeout: 5 * time.Second}
	for s.sleep(20 * time.Second) {
		l, err := env.client.CoreV1().Pods(releaseNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kvcache-operator"})
		if err != nil {
			continue
		}
		for _, p := range l.Items {
			if p.Status.PodIP == "" || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
				continue
			}
			resp, err := hc.Get(fmt.Sprintf("http://%s:%d/metrics", p.Status.PodIP, managerMetricsPort))
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			rss, g := metricValue(string(body), "process_resident_memory_bytes"), metricValue(string(body), "go_goroutines")
			key := fmt.Sprintf("%s#%d", p.Name, p.Status.ContainerStatuses[0].RestartCount)
			s.mu.Lock()
			s.samples[key] = append(s.samples[key], procSample{at: time.Now(), rss: rss, goroutines: g})
			s.mu.Unlock()
		}
	}
}

// collectLogs appends what every manager replica logged since the last call to its file.
func (s *soak) collectLogs() {
	l, err := env.client.CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kvcache-operator"})
	if err != nil {
		return
	}
	for _, p := range l.Items {
		file := filepath.Join(s.cfg.out, "logs", p.Namespace+"_"+p.Name+".log")
		since := lastLogTime(file)
		opts := &corev1.PodLogOptions{Timestamps: true}
		if !since.IsZero() {
			opts.SinceTime = metaNow(since)
		}
		raw, err := env.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).DoRaw(context.Background())
		if err != nil {
			continue
		}
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			ts, _, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || !at.After(since) {
				continue
			}
			_, _ = f.WriteString(line + "\n")
		}
		_ = f.Close()
	}
}

func lastLogTime(file string) time.Time {
	f, err := os.Open(file)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	var last time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if ts, _, ok := strings.Cut(sc.Text(), " "); ok {
			if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				last = at
			}
		}
	}
	return last
}

// checkInjection: every opted-in Pod that runs carries what injection writes for it now, or
// is counted drifted with the reason; none runs uninjected.
func (s *soak) checkInjection() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := env.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: vocab.LabelInject + "=true"})
	if err != nil {
		return
	}
	lookup := objects.Cluster{Cached: env.kube, Live: env.kube}
	s.mu.Lock()
	s.checks++
	s.mu.Unlock()
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		name := p.Namespace + "/" + p.Name
		if p.Annotations[vocab.AnnotationInjected] == "" {
			s.breach("1 injection", "opted-in Pod %s runs uninjected", name)
			continue
		}
		diffs, err := s.injector.Drift(ctx, p, p.Namespace, lookup)
		var rf *injection.Refusal
		switch {
		case errors.As(err, &rf):
			if s.active(time.Now(), 2*time.Second) == nil {
				s.breach("1 injection", "injection would refuse the running Pod %s now: %s", name, rf.Message)
			}
		case err != nil:
		case len(diffs) > 0:
			s.mu.Lock()
			if _, ok := s.drifted[name]; !ok {
				s.drifted[name] = strings.Join(diffs, "; ")
				s.mu.Unlock()
				s.event("drifted", map[string]any{"pod": name, "why": strings.Join(diffs, "; ")})
				continue
			}
			s.mu.Unlock()
		}
	}
}

// finalChecks: the store settles once more with the load gone; every engine's rounds are
// judged against the fault windows; the managers' growth and logs are judged.
func (s *soak) finalChecks() {
	if ok, msg := s.settle(5 * time.Minute); !ok {
		s.breach("3 settle", "the end state did not settle within 5 minutes: %s", msg)
	}
	s.checkInjection()
	s.collectLogs()
	// The ModelDeployment's Pods wrote the whole time too.
	if l, err := env.client.CoreV1().Pods(bindingNS).List(context.Background(), metav1.ListOptions{LabelSelector: vocab.LabelInject + "=true"}); err == nil {
		for _, p := range l.Items {
			if p.Labels["kvcache-soak"] == "" && p.DeletionTimestamp == nil {
				run := &engineRun{namespace: p.Namespace, name: p.Name, engine: "ModelDeployment", created: p.CreationTimestamp.Time}
				s.readRounds(run)
				s.engines = append(s.engines, run)
			}
		}
	}
	for _, e := range s.engines {
		for _, r := range e.rounds {
			if r.wrong {
				s.breach("4 wrong bytes", "engine %s/%s read back bytes other than its key's own at %s", e.namespace, e.name, r.at.UTC().Format(time.TimeOnly))
			}
			if !r.ok && s.active(r.at, 3*time.Second) == nil {
				s.breach("4 writes", "engine %s/%s: a round failed outside any fault at +%s (put returned %v)", e.namespace, e.name, r.at.Sub(s.t0).Round(time.Second), r.put)
			}
		}
	}
	s.judgeGrowth()
	s.judgeRepetition()
}

// writeRecovery is how long after the fault's start every engine that failed in its window
// wrote again, the worst engine's, and how many rounds failed in it.
func (s *soak) writeRecovery(w *window) (time.Duration, int) {
	var worst time.Duration
	failed := 0
	for _, e := range s.engines {
		var lastFail time.Time
		for _, r := range e.rounds {
			if !w.covers(r.at, 3*time.Second) {
				continue
			}
			if !r.ok {
				failed++
				lastFail = r.at
			}
		}
		if lastFail.IsZero() {
			continue
		}
		for _, r := range e.rounds {
			if r.ok && r.at.After(lastFail) {
				if d := r.at.Sub(w.start); d > worst {
					worst = d
				}
				break
			}
		}
	}
	return worst, failed
}

// refusedIn counts the valid creates refused in the window.
func (s *soak) refusedIn(w *window) int {
	n := 0
	for _, r := range s.refusals {
		if !strings.HasPrefix(r.what, "must-refuse") && w.covers(r.at, 2*time.Second) {
			n++
		}
	}
	return n
}

// slope fits y = a + b*t by least squares and returns b per hour.
func slope(xs []procSample, y func(procSample) float64) float64 {
	if len(xs) < 3 {
		return 0
	}
	var st, sy, stt, sty float64
	t0 := xs[0].at
	for _, x := range xs {
		t := x.at.Sub(t0).Hours()
		st += t
		sy += y(x)
		stt += t * t
		sty += t * y(x)
	}
	n := float64(len(xs))
	den := n*stt - st*st
	if den == 0 {
		return 0
	}
	return (n*sty - st*sy) / den
}

// growth is the report's table: every manager container run, and for those judged (see
// judgeGrowth) the fitted change per hour after their first minutes; a shorter run's slope
// would be its start-up.
func (s *soak) growth() string {
	keys := make([]string, 0, len(s.samples))
	for k := range s.samples {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("| container run | samples | lived | RSS first / last | goroutines first / last | judged: RSS per hour | judged: goroutines per hour |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, k := range keys {
		xs := s.samples[k]
		first, last := xs[0], xs[len(xs)-1]
		rss, gor := fmt.Sprintf("not judged (lived under %s)", judgedLife), "not judged"
		if steady := steadyPart(xs); steady != nil {
			rss = fmt.Sprintf("%+.1f MiB", slope(steady, func(p procSample) float64 { return p.rss })/(1<<20))
			gor = fmt.Sprintf("%+.1f", slope(steady, func(p procSample) float64 { return p.goroutines }))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.1f / %.1f MiB | %.0f / %.0f | %s | %s |\n", k, len(xs), last.at.Sub(first.at).Round(time.Second),
			first.rss/(1<<20), last.rss/(1<<20), first.goroutines, last.goroutines, rss, gor)
	}
	return b.String()
}

// A manager's growth is judged when it lived judgedLife, over its samples after warmUp (caches
// fill, workers start).
const (
	judgedLife = 12 * time.Minute
	warmUp     = 3 * time.Minute
)

// steadyPart is a manager run's samples after warmUp when it lived judgedLife; nil otherwise.
func steadyPart(xs []procSample) []procSample {
	if len(xs) < 3 || xs[len(xs)-1].at.Sub(xs[0].at) < judgedLife {
		return nil
	}
	var steady []procSample
	for _, x := range xs {
		if x.at.Sub(xs[0].at) >= warmUp {
			steady = append(steady, x)
		}
	}
	if len(steady) < 3 {
		return nil
	}
	return steady
}

// judgeGrowth: a manager process that lived judgedLife may not grow after its warmUp:
// its fitted goroutines by more than a fifth (and 20), its resident memory by more than a
// quarter. Shorter lives are reported, not judged. A run with a steady stretch must have judged
// at least one manager: otherwise the invariant held by default.
func (s *soak) judgeGrowth() {
	judged := 0
	for k, xs := range s.samples {
		steady := steadyPart(xs)
		if steady == nil {
			continue
		}
		judged++
		lived := xs[len(xs)-1].at.Sub(xs[0].at)
		h := steady[len(steady)-1].at.Sub(steady[0].at).Hours()
		mean := func(y func(procSample) float64) float64 {
			var t float64
			for _, x := range steady {
				t += y(x)
			}
			return t / float64(len(steady))
		}
		g := slope(steady, func(p procSample) float64 { return p.goroutines }) * h
		if gm := mean(func(p procSample) float64 { return p.goroutines }); g > 20 && g > gm/5 {
			s.breach("5 growth", "manager %s: goroutines grew %.0f over %s (mean %.0f)", k, g, lived.Round(time.Minute), gm)
		}
		r := slope(steady, func(p procSample) float64 { return p.rss }) * h
		if rm := mean(func(p procSample) float64 { return p.rss }); r > rm/4 {
			s.breach("5 growth", "manager %s: resident memory grew %.1f MiB over %s (mean %.1f MiB)", k, r/(1<<20), lived.Round(time.Minute), rm/(1<<20))
		}
	}
	if s.cfg.steady > 0 && judged == 0 {
		s.breach("5 growth", "no manager container lived %s, even through the %s without faults: growth was not judged", judgedLife, s.cfg.steady)
	}
}

// judgeRepetition: no line a manager logged (its time and reconcile id aside) repeats more
// than once a second over any 10 seconds.
func (s *soak) judgeRepetition() {
	files, _ := filepath.Glob(filepath.Join(s.cfg.out, "logs", releaseNS+"_*.log"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		buckets := map[string]map[int64]int{}
		for _, line := range strings.Split(string(raw), "\n") {
			ts, rest, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				continue
			}
			key := normalizeLogLine(rest)
			if buckets[key] == nil {
				buckets[key] = map[int64]int{}
			}
			buckets[key][at.Unix()/10]++
		}
		for key, per := range buckets {
			for b, n := range per {
				if n > 10 {
					s.breach("5 logs", "%s logged one line %d times in the 10 s from %s: %.300s", filepath.Base(f), n, time.Unix(b*10, 0).UTC().Format(time.TimeOnly), key)
					break
				}
			}
		}
	}
}

// normalizeLogLine drops what differs between repetitions of one line: its time and the
// reconcile's id.
func normalizeLogLine(line string) string {
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	delete(m, "ts")
	delete(m, "reconcileID")
	b, _ := json.Marshal(m)
	return string(b)
}

// managerMetricsPort is the chart's default metrics.port.
const managerMetricsPort = 8080
