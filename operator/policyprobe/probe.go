package policyprobe

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/vocab"
)

// A NetworkPolicy is only as good as the network plugin that enforces it, and a plugin that
// ignores policies says nothing. The store's policy admits the manager to the master's admin
// port only, so the manager can measure enforcement itself: it opens a connection to the
// serving master's RPC port, on the Pod's own address. Enforced, the connection is never
// answered (the first packet is dropped) and the dial times out; not enforced, the master
// accepts it, or its node refuses it, and either answer proves packets get through.

// probeTimeout bounds one probe: an answer comes within a round trip; none within this is a
// dropped packet.
const probeTimeout = 2 * time.Second

// DefaultEvery is how often a backend's enforcement is measured again while its serving master
// stays where it is.
const DefaultEvery = 5 * time.Minute

// Dialer opens the probe's connection (tests replace it).
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// verdict is what one probe measured.
type verdict int

const (
	probeUnknown verdict = iota
	probeEnforced
	probeNotEnforced
)

// judgeProbe reads a dial's outcome: connected or refused is a packet that got through, a
// timeout one that was dropped; anything else (no route, no address) says nothing.
func judgeProbe(err error) (verdict, string) {
	var ne net.Error
	switch {
	case err == nil:
		return probeNotEnforced, "the master accepted it"
	case errors.Is(err, syscall.ECONNREFUSED):
		return probeNotEnforced, "its node refused it"
	case errors.As(err, &ne) && ne.Timeout():
		return probeEnforced, "it went unanswered"
	default:
		return probeUnknown, err.Error()
	}
}

// probe is one measurement.
type probe struct {
	at      time.Time
	address string
	verdict verdict
	detail  string
}

// due says whether a backend whose serving master is at address is measured again at now.
func (p probe) due(address string, now time.Time, every time.Duration) bool {
	return p.address != address || now.Sub(p.at) >= every
}

// probes remembers each backend's last measurement, by the backend's name.
type probes struct {
	mu   sync.Mutex
	last map[string]probe
}

func (p *probes) get(backend string) (probe, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.last[backend]
	return v, ok
}

func (p *probes) put(backend string, v probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]probe{}
	}
	p.last[backend] = v
}

func (p *probes) forget(backend string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, backend)
}

// servingMasterAddress is the Pod IP and RPC port of the leader Pod that serves ("" when none
// is known): the probe goes to a Pod the policy selects, not through the Service, whose
// answer when it has no endpoint is the node's refusal whatever the policy.
func servingMasterAddress(pods []corev1.Pod, port int32) string {
	for i := range pods {
		p := &pods[i]
		if p.Labels[vocab.LabelComponent] != vocab.ComponentLeader || p.Status.PodIP == "" || !p.DeletionTimestamp.IsZero() || !podReady(p) {
			continue
		}
		return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port)))
	}
	return ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
