package leader

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// holdAskAfter is how long after its last renewal a leader starts asking its peers to hold:
// two missed renewals, leaving several rounds before the renew deadline.
func (c Config) holdAskAfter() time.Duration { return 2 * c.RetryPeriod }

// pruneEvery is how many hold ticks pass between checks that the peers' Pods still exist.
const pruneEvery = 10

// holdDeadline is when a leader's master must be dead at the latest. A renewal (the leader's
// own, or one a peer wrote for it) fences every launcher for the lease duration from when it
// was written; a round in which every acknowledged peer promised fences every launcher that
// could take over for the lease duration from when it was asked (the peers promised that, the
// others wait maxHold longer, takeoverGate). Either leaves the same margin as the Lease: the
// master is killed at the renew deadline past it. Promises never carry the master more than
// maxHold past the last renewal.
func holdDeadline(renewed, promised time.Time, renewDeadline, maxHold time.Duration) time.Time {
	d := renewed.Add(renewDeadline)
	if !promised.After(renewed) {
		return d
	}
	held := promised.Add(renewDeadline)
	if limit := renewed.Add(maxHold); held.After(limit) {
		held = limit
	}
	if held.After(d) {
		return held
	}
	return d
}

// holdRound is one round of hold requests: when it was sent, what each peer answered, and
// whether a peer was acknowledged meanwhile (it was not asked, so the round cannot count).
type holdRound struct {
	sent       time.Time
	answers    map[string]holdAnswer
	peersGrown bool
}

// holdOutcome is what a round means for the leader.
type holdOutcome struct {
	renewedBy   string // a peer renewed the Lease on this leader's behalf
	lostTo      string // a peer read the Lease naming this holder instead
	allPromised bool   // every peer promised, and the set did not grow
	missing     []string
}

func judgeRound(r holdRound) holdOutcome {
	var o holdOutcome
	names := make([]string, 0, len(r.answers))
	for n := range r.answers {
		names = append(names, n)
	}
	slices.Sort(names)
	promised := 0
	for _, n := range names {
		a := r.answers[n]
		switch a.Verdict {
		case verdictRenewed:
			if o.renewedBy == "" {
				o.renewedBy = n
			}
		case verdictLost:
			if o.lostTo == "" {
				o.lostTo = a.Holder
			}
		case verdictPromised:
			promised++
			continue
		}
		if a.Verdict != verdictRenewed {
			o.missing = append(o.missing, fmt.Sprintf("%s: %s %s", n, a.Verdict, a.Reason))
		}
	}
	o.allPromised = promised == len(names) && !r.peersGrown
	return o
}

// holdRounds runs while this launcher leads: once its own renewals have failed for holdAskAfter
// it asks every peer each retry period. A proxy renewal is recorded in the lock (it renews like the
// leader's own); a promise of every peer and a lost Lease are sent on events.
func (p *peerNet) holdRounds(ctx context.Context, maxHold time.Duration, events chan<- holdOutcomeAt) {
	tick := time.NewTicker(p.c.RetryPeriod)
	defer tick.Stop()
	var said changeLog
	say := func(msg string, kv ...any) { said.info(p.log, msg, kv...) }
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		last := p.lock.lastRenewal()
		if time.Since(p.lock.lastOwnRenewal()) < p.c.holdAskAfter() {
			if said.reset() {
				p.log.Info("renewing the Lease again")
			}
			if n%pruneEvery == 0 {
				p.prune(ctx)
			}
			continue
		}
		r := p.round(ctx)
		o := judgeRound(r)
		switch {
		case o.lostTo != "":
			say("a peer reads the Lease naming another holder", "holder", o.lostTo)
		case o.renewedBy != "":
			p.lock.noteProxyRenewal(r.sent)
			say("renewals fail here: a peer renews the Lease on this launcher's behalf", "peer", o.renewedBy, "lastOwnOrPeerRenewal", last)
		case o.allPromised:
			say("renewals fail here and every peer's too: holding the master on their promises", "peers", len(r.answers), "maxHold", maxHold, "lastRenewal", last)
		default:
			say("renewals fail here and not every peer promised: the master stops at the renew deadline", "missing", strings.Join(o.missing, "; "))
		}
		if o.lostTo != "" || o.allPromised {
			select {
			case events <- holdOutcomeAt{holdOutcome: o, sent: r.sent}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// holdOutcomeAt is a round's outcome and when it was sent.
type holdOutcomeAt struct {
	holdOutcome
	sent time.Time
}

// round asks every acknowledged peer at once, for at most a retry period.
func (p *peerNet) round(ctx context.Context) holdRound {
	peers, version := p.peerSnapshot()
	r := holdRound{sent: time.Now(), answers: make(map[string]holdAnswer, len(peers))}
	req := holdRequest{Term: p.lock.leadTerm(), Sent: r.sent.UnixNano(), Wait: p.c.RetryPeriod}
	cctx, cancel := context.WithTimeout(ctx, p.c.RetryPeriod)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, ip := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var a holdAnswer
			if err := p.call(cctx, ip, pathHold, req, &a); err != nil {
				a = holdAnswer{Verdict: verdictRefused, Reason: "no answer: " + err.Error()}
			}
			mu.Lock()
			r.answers[name] = a
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.peersGrown = p.peerVersion() != version
	return r
}
