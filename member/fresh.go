package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/kvcache-operator/kvcache/store"
)

// The store's own range for the port it appends to a hostname without one
// (MC_STORE_CLIENT_MIN_PORT, MC_STORE_CLIENT_MAX_PORT): the default range of a fresh name.
const (
	DefaultFreshMinPort = 12300
	DefaultFreshMaxPort = 14300
)

// Backoff of FreshName while no master serves.
const (
	freshFirstBackoff = 250 * time.Millisecond
	freshMaxBackoff   = 5 * time.Second
	// freshStillWaiting spaces the lines of a long wait.
	freshStillWaiting = 30 * time.Second
)

// MasterReader is the part of the master's admin API a fresh name is read from; *store.Client
// implements it.
type MasterReader interface {
	Health(ctx context.Context) (store.Health, error)
	Segments(ctx context.Context) ([]store.Segment, error)
	Metrics(ctx context.Context) (store.Metrics, error)
}

// FreshConfig is what choosing a fresh segment name needs.
type FreshConfig struct {
	// Admin is the serving master's admin API (the leader Service's admin port).
	Admin MasterReader
	// PodIP is the member Pod's IP, the host part of the name.
	PodIP string
	// MinPort and MaxPort bound the name's port, both included. The port is a label only (a
	// member started with a port in its hostname listens on none of it), so the range needs no
	// free sockets; member groups whose Pods share an IP (host networking) take disjoint ranges.
	MinPort, MaxPort int
	// Log receives what the wait is for (nil: nothing).
	Log *slog.Logger
	// Intn picks a port among n candidates (nil: math/rand/v2).
	Intn func(n int) int
}

// Fresh is the name chosen and what it was chosen against.
type Fresh struct {
	// Name is <PodIP>:<port>, or [<PodIP>]:<port> for IPv6: a name with a port, which the
	// member takes as it is.
	Name string
	Port int
	// Live are this host's segments the master has mounted; Dead those it only knows from
	// its index (the segment label of its /metrics), such as a member that died across a
	// failover. The name is in neither.
	Live, Dead []string
	// Waited is how long the choice took, nearly all of it waiting for a master that serves;
	// Attempts counts the reads.
	Waited   time.Duration
	Attempts int
}

// ErrPortRangeExhausted is wrapped when every port of the range is in a name the master knows.
var ErrPortRangeExhausted = errors.New("no port of the range is free of the names the master knows")

// FreshName waits (with backoff, logging what it waits for, until ctx ends) for a master that
// serves, collects every segment name that master knows for PodIP, mounted or only indexed, and
// returns a name <PodIP>:<port> with a port in [MinPort, MaxPort] in none of them, picked at
// random so that two members starting together on one IP and range rarely pick alike.
//
// The name matters because a restored index keeps the objects of a member that died across a
// failover: a new member mounting under the same name, with its memory where the old one's
// was, has them read back as whatever its memory holds, with a success code. Under a name the
// master has never seen they stay unreadable, and reads of them miss.
func FreshName(ctx context.Context, c FreshConfig) (Fresh, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Intn == nil {
		c.Intn = rand.IntN
	}
	ip, err := podAddr(c.PodIP)
	if err != nil {
		return Fresh{}, err
	}
	if c.MinPort < 1 || c.MaxPort > 65535 || c.MinPort > c.MaxPort {
		return Fresh{}, fmt.Errorf("port range %d-%d: want 1 <= min <= max <= 65535", c.MinPort, c.MaxPort)
	}
	start := time.Now()
	gaveUp := func(last error) error {
		return fmt.Errorf("no master served within %s (last: %w): %w", time.Since(start).Round(time.Millisecond), last, ctx.Err())
	}
	backoff := freshFirstBackoff
	var lastReason string
	var lastLog time.Time
	for attempt := 1; ; attempt++ {
		live, dead, err := knownNames(ctx, c.Admin, ip)
		if err == nil {
			f, err := pick(c, ip, live, dead)
			f.Waited, f.Attempts = time.Since(start), attempt
			return f, err
		}
		if errors.Is(err, store.ErrNotSupported) {
			return Fresh{}, fmt.Errorf("the master cannot list its segments, so no name can be proven fresh: %w", err)
		}
		if ctx.Err() != nil {
			return Fresh{}, gaveUp(err)
		}
		if reason := err.Error(); reason != lastReason || time.Since(lastLog) >= freshStillWaiting {
			c.Log.Info("member-run-waiting", "waiting_for", "a master that serves, to read the segment names it knows", "reason", reason,
				"elapsed", time.Since(start).Round(time.Millisecond).String(), "attempt", attempt)
			lastReason, lastLog = reason, time.Now()
		}
		select {
		case <-ctx.Done():
			return Fresh{}, gaveUp(err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, freshMaxBackoff)
	}
}

// podAddr parses the Pod IP. The name needs an address: a hostname could resolve to another
// member's, and names are told apart by address.
func podAddr(podIP string) (net.IP, error) {
	ip := net.ParseIP(podIP)
	if ip == nil {
		return nil, fmt.Errorf("pod IP %q is not an IP address", podIP)
	}
	if v4 := ip.To4(); v4 != nil {
		return v4, nil
	}
	return ip, nil
}

// segmentName joins the Pod IP and a port as the member must be told it: IPv6 in brackets,
// without which the store reads "fd00::7:1300" as an address without a port (all of it a
// valid IPv6 address) and appends a random port of its own.
func segmentName(ip net.IP, port int) string {
	return net.JoinHostPort(ip.String(), strconv.Itoa(port))
}

// knownNames reads, from one master that serves throughout, this host's mounted segments and
// the segment names its /metrics carries. The health is read before and after: only a serving
// master lists segments, but a standby answers /metrics too, and a failover between the reads
// would mix two masters' views.
func knownNames(ctx context.Context, m MasterReader, ip net.IP) (live, dead []string, err error) {
	serving := func() error {
		h, err := m.Health(ctx)
		if err != nil {
			return err
		}
		if !h.ServiceReady {
			return fmt.Errorf("the master is not serving (role %q, ha_state %q)", h.Role, h.HAState)
		}
		return nil
	}
	if err := serving(); err != nil {
		return nil, nil, err
	}
	segs, err := m.Segments(ctx)
	if err != nil {
		return nil, nil, err
	}
	metrics, err := m.Metrics(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := serving(); err != nil {
		return nil, nil, err
	}
	mounted := map[string]bool{}
	for _, s := range segs {
		if ofHost(s.Name, ip) {
			live = append(live, s.Name)
			mounted[s.Name] = true
		}
	}
	for name := range metrics.Segments {
		if ofHost(name, ip) && !mounted[name] {
			dead = append(dead, name)
		}
	}
	slices.Sort(live)
	slices.Sort(dead)
	return live, dead, nil
}

func ofHost(name string, ip net.IP) bool {
	host, _, ok := store.SplitSegmentName(name)
	return ok && store.SameHost(host, ip.String())
}

// pick draws a port of the range that no known name of the host has.
func pick(c FreshConfig, ip net.IP, live, dead []string) (Fresh, error) {
	f := Fresh{Live: live, Dead: dead}
	taken := map[int]bool{}
	for _, n := range append(slices.Clone(live), dead...) {
		if _, p, ok := store.SplitSegmentName(n); ok {
			taken[p] = true
		}
	}
	size := c.MaxPort - c.MinPort + 1
	free := size
	for p := range taken {
		if p >= c.MinPort && p <= c.MaxPort {
			free--
		}
	}
	if free == 0 {
		return f, fmt.Errorf("port range %d-%d for %s: all %d ports are in names the master knows (%d mounted, %d only indexed): %w",
			c.MinPort, c.MaxPort, ip, size, len(live), len(dead), ErrPortRangeExhausted)
	}
	// The k-th free port of the range, counted without building the list: the range may be
	// the whole port space.
	k := c.Intn(free)
	for p := c.MinPort; p <= c.MaxPort; p++ {
		if taken[p] {
			continue
		}
		if k == 0 {
			f.Port, f.Name = p, segmentName(ip, p)
			return f, nil
		}
		k--
	}
	return f, fmt.Errorf("port range %d-%d: %w", c.MinPort, c.MaxPort, ErrPortRangeExhausted) // unreachable
}
