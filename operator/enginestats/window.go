package enginestats

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Samples remembers the recent scrapes of every engine Pod, so that the figures of a window can
// be computed from counters that only ever grow (and start again from zero when the engine
// restarts). It is safe for concurrent use; the zero value is ready.
type Samples struct {
	mu   sync.Mutex
	pods map[types.UID]*history
}

type sample struct {
	at time.Time
	c  Counters
}

type history struct {
	samples []sample
	// starts[i] is samples[i]'s process start.
	starts  []time.Time
	lastErr error
	errAt   time.Time
}

// Add records a scrape of Pod pod, whose engine container started at started (its counters
// count from then).
func (s *Samples) Add(pod types.UID, started, at time.Time, c Counters) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.history(pod)
	h.samples = append(h.samples, sample{at: at, c: c})
	h.starts = append(h.starts, started)
	h.lastErr = nil
}

// Failed records that Pod pod could not be scraped at at.
func (s *Samples) Failed(pod types.UID, at time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.history(pod)
	h.lastErr, h.errAt = err, at
}

func (s *Samples) history(pod types.UID) *history {
	if s.pods == nil {
		s.pods = map[types.UID]*history{}
	}
	h := s.pods[pod]
	if h == nil {
		h = &history{}
		s.pods[pod] = h
	}
	return h
}

// Due reports whether Pod pod was last scraped (or tried) longer than interval before now.
func (s *Samples) Due(pod types.UID, now time.Time, interval time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.pods[pod]
	if h == nil {
		return true
	}
	last := h.errAt
	if n := len(h.samples); n > 0 && h.samples[n-1].at.After(last) {
		last = h.samples[n-1].at
	}
	return now.Sub(last) >= interval
}

// Expire drops what is remembered of every Pod neither scraped nor tried since before: a Pod
// that went (deleted, or no longer Ready) is no longer asked for, and nothing else says so.
func (s *Samples) Expire(before time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, h := range s.pods {
		last := h.errAt
		if n := len(h.samples); n > 0 && h.samples[n-1].at.After(last) {
			last = h.samples[n-1].at
		}
		if last.Before(before) {
			delete(s.pods, uid)
		}
	}
}

// Forget drops what is remembered of the Pods not in keep.
func (s *Samples) Forget(keep func(types.UID) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.pods {
		if !keep(uid) {
			delete(s.pods, uid)
		}
	}
}

// Window is what a set of engine Pods did over a window, from their own counters.
type Window struct {
	// Window is its length; From is where the figures start for every Pod: the window's
	// start, or later when a Pod that started before the window was first scraped within it
	// (the operator started meanwhile, or the Pod became reachable): what it did before its
	// first scrape is not counted.
	Window time.Duration
	From   time.Time
	// The counters' increase over the window, summed over the Pods.
	PromptTokens, StoreTokens, QueriedTokens, Written, Requests float64
	// Pods is how many Pods were scraped in the window; Unreadable how many of the Pods asked
	// for had no scrape in it, with one of their errors (Err).
	Pods, Unreadable int
	Err              error
	// Models are the model names the Pods' series carry, sorted.
	Models []string
}

// HitRatio is the share of the prompt tokens asked that the store served; ok is false when no
// prompt token was asked in the window.
func (w Window) HitRatio() (ratio float64, ok bool) {
	if w.PromptTokens <= 0 {
		return 0, false
	}
	return w.StoreTokens / w.PromptTokens, true
}

// Window sums the increase of the counters of pods over the window ending at now, and prunes
// what no window of this length will read again.
//
// A Pod's increase is taken from its last scrape before the window began; a Pod whose engine
// started within the window counts from zero (its counters began there); otherwise its first
// scrape in the window is where it starts. A counter that went down, or a scrape from a later
// process start, is an engine restart: the new value is counted whole, as Prometheus' increase()
// does.
func (s *Samples) Window(pods []types.UID, now time.Time, window time.Duration) Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := now.Add(-window)
	w := Window{Window: window, From: start}
	models := map[string]bool{}
	for _, uid := range pods {
		h := s.pods[uid]
		if h == nil {
			w.Unreadable++
			continue
		}
		h.prune(start)
		first := -1
		for i, sm := range h.samples {
			if !sm.at.Before(start) {
				first = i
				break
			}
		}
		if first < 0 {
			w.Unreadable++
			if h.lastErr != nil && w.Err == nil {
				w.Err = h.lastErr
			}
			continue
		}
		w.Pods++
		var prev *Counters
		var prevStart time.Time
		switch {
		case first > 0:
			prev, prevStart = &h.samples[first-1].c, h.starts[first-1]
		case !h.starts[first].IsZero() && !h.starts[first].Before(start):
			prev, prevStart = &Counters{}, h.starts[first]
		default:
			if h.samples[first].at.After(w.From) {
				w.From = h.samples[first].at
			}
		}
		for i := first; i < len(h.samples); i++ {
			c := h.samples[i].c
			restarted := prev != nil && !h.starts[i].Equal(prevStart)
			if prev != nil {
				w.PromptTokens += increase(prev.PromptTokens, c.PromptTokens, restarted)
				w.StoreTokens += increase(prev.StoreTokens, c.StoreTokens, restarted)
				w.QueriedTokens += increase(prev.QueriedTokens, c.QueriedTokens, restarted)
				w.Written += increase(prev.Written, c.Written, restarted)
				w.Requests += increase(prev.Requests, c.Requests, restarted)
			}
			for _, m := range c.Models {
				models[m] = true
			}
			prev, prevStart = &h.samples[i].c, h.starts[i]
		}
	}
	for m := range models {
		w.Models = append(w.Models, m)
	}
	slices.Sort(w.Models)
	return w
}

func increase(prev, cur float64, restarted bool) float64 {
	if restarted || cur < prev {
		return cur
	}
	return cur - prev
}

// prune keeps the last sample before start (the window's baseline) and every later one.
func (h *history) prune(start time.Time) {
	keepFrom := 0
	for i, sm := range h.samples {
		if sm.at.Before(start) {
			keepFrom = i
		}
	}
	if keepFrom > 0 {
		h.samples = slices.Delete(h.samples, 0, keepFrom)
		h.starts = slices.Delete(h.starts, 0, keepFrom)
	}
}
