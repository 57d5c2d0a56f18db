package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
)

// What the engines themselves say about the store. The operator reads each Ready engine Pod's
// /metrics directly from its Pod IP, the way a Prometheus would: the API server's Pod proxy
// would need pods/proxy on every namespace (a way into any port of any Pod) and would carry
// every scrape through the API server, and the user's Prometheus may not exist. A
// NetworkPolicy that admits the user's monitoring admits the manager's namespace the same way;
// a Pod it cannot reach is counted unread, with the reason.

// Defaults of the engine reader.
const (
	// DefaultHitRateWindow is how far back StoreHits reaches: long enough to hold a few
	// requests of an idle service, short enough that a fault shows within minutes.
	DefaultHitRateWindow = 15 * time.Minute
	// DefaultEngineScrapeInterval is the least time between two reads of one engine Pod: the
	// Binding's and the ModelDeployment's controllers share the reads.
	DefaultEngineScrapeInterval = 30 * time.Second
	// maxScrapes bounds the engine Pods read at once by one reconcile.
	maxScrapes = 8
)

// EngineReader scrapes engine Pods and remembers their counters; one is shared by every
// controller that reports hits, so each Pod is read at most once per interval. The zero value
// is ready.
type EngineReader struct {
	Scraper  enginestats.Scraper
	Interval time.Duration
	samples  enginestats.Samples

	mu      sync.Mutex
	expired time.Time
}

// expireAfter is how long a Pod nobody asks for any more is remembered: a window holds a Pod's
// last read before it as its baseline, so a Pod is kept well past the longest window.
const expireAfter = 2 * time.Hour

// ScrapeInterval is the least time between two reads of one Pod.
func (r *EngineReader) ScrapeInterval() time.Duration {
	if r.Interval <= 0 {
		return DefaultEngineScrapeInterval
	}
	return r.Interval
}

// Read scrapes the Ready Pods among pods whose last read is older than the interval, at most
// maxScrapes at a time.
func (r *EngineReader) Read(ctx context.Context, pods []PodUse, now time.Time) {
	r.mu.Lock()
	if now.Sub(r.expired) > time.Minute {
		r.expired = now
		r.samples.Expire(now.Add(-expireAfter))
	}
	r.mu.Unlock()
	sem := make(chan struct{}, maxScrapes)
	var wg sync.WaitGroup
	for _, p := range pods {
		if !p.Ready || p.UID == "" || !r.samples.Due(p.UID, now, r.ScrapeInterval()) {
			continue
		}
		if p.MetricsErr != "" {
			r.samples.Failed(p.UID, now, fmt.Errorf("%s", p.MetricsErr))
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(p PodUse) {
			defer func() { <-sem; wg.Done() }()
			c, err := r.Scraper.Scrape(ctx, p.Engine, p.MetricsURL)
			if err != nil {
				r.samples.Failed(p.UID, now, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
				return
			}
			r.samples.Add(p.UID, p.EngineStarted, now, c)
		}(p)
	}
	wg.Wait()
}

// Window is what the Ready Pods among pods did over the window ending at now.
func (r *EngineReader) Window(pods []PodUse, now time.Time, window time.Duration) enginestats.Window {
	var uids []types.UID
	for _, p := range pods {
		if p.Ready && p.UID != "" {
			uids = append(uids, p.UID)
		}
	}
	return r.samples.Window(uids, now, window)
}

// HitRateWindowOr is d, or DefaultHitRateWindow when d is zero.
func HitRateWindowOr(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultHitRateWindow
	}
	return d
}

// StoreHitsOf is the status figure of a window; nil when no Pod was asked for (no Ready engine
// Pod uses the tenant), so the field goes rather than claim zero.
func StoreHitsOf(w enginestats.Window, now time.Time) *kvv1.StoreHits {
	if w.Pods == 0 && w.Unreadable == 0 {
		return nil
	}
	h := &kvv1.StoreHits{
		Window: metav1.Duration{Duration: w.Window}, Since: metav1.Time{Time: w.From.UTC().Truncate(time.Second)},
		PromptTokens: int64(w.PromptTokens), StoreTokens: int64(w.StoreTokens),
		Pods: int32(w.Pods), Unread: int32(w.Unreadable), ObservedTime: metav1.Time{Time: now.UTC().Truncate(time.Second)},
	}
	if ratio, ok := w.HitRatio(); ok {
		h.Ratio = FormatRatio(ratio)
	}
	if w.Unreadable > 0 {
		why := "not read yet"
		if w.Err != nil {
			why = w.Err.Error()
		}
		h.Message = fmt.Sprintf("%d of %d Ready engine %s could not be read: %s", w.Unreadable, w.Pods+w.Unreadable, plural(w.Pods+w.Unreadable, "Pod", "Pods"), why)
	}
	return h
}

// FormatRatio is a share in percent with one decimal, as status and `kvcache check` print it.
func FormatRatio(r float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", 100*r), ".0") + "%"
}

// RefreshStoreHits decides which figure status carries after a read, as RefreshUsage does for
// bytes: the new one when it appeared or went, when the Pods read or unread changed, when the
// store started or stopped serving (zero crossed), or when the one in status is older than
// refresh; otherwise the one in status, so a service whose counters move every poll is not
// rewritten every poll.
func RefreshStoreHits(prev, read *kvv1.StoreHits, now time.Time, refresh time.Duration) *kvv1.StoreHits {
	switch {
	case read == nil || prev == nil:
		return read
	case prev.PromptTokens == read.PromptTokens && prev.StoreTokens == read.StoreTokens && prev.Pods == read.Pods &&
		prev.Unread == read.Unread && prev.Message == read.Message && prev.Window == read.Window:
		return prev
	case prev.Pods != read.Pods || prev.Unread != read.Unread || prev.Message != read.Message,
		(prev.StoreTokens == 0) != (read.StoreTokens == 0), (prev.Ratio == "") != (read.Ratio == ""),
		now.Sub(prev.ObservedTime.Time) >= refresh:
		return read
	}
	return prev
}
