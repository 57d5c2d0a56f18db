package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// A NetworkPolicy is only as good as the network plugin that enforces it, and a plugin that
// ignores policies says nothing. The store's policy admits the manager to the master's admin
// port only, so the manager can measure enforcement itself: it opens a connection to the
// serving master's RPC port, on the Pod's own address. Enforced, the connection is never
// answered (the first packet is dropped) and the dial times out; not enforced, the master
// accepts it, or its node refuses it, and either answer proves packets get through.

// policyProbeTimeout bounds one probe: an answer comes within a round trip; none within this
// is a dropped packet.
const policyProbeTimeout = 2 * time.Second

// policyProbeEvery is how often a backend's enforcement is measured again.
const policyProbeEvery = 5 * time.Minute

// Dialer opens the probe's connection (tests replace it).
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// probeVerdict is what one probe measured.
type probeVerdict int

const (
	probeUnknown probeVerdict = iota
	probeEnforced
	probeNotEnforced
)

// judgeProbe reads a dial's outcome: connected or refused is a packet that got through, a
// timeout one that was dropped; anything else (no route, no address) says nothing.
func judgeProbe(err error) (probeVerdict, string) {
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

// policyProbes remembers each backend's last measurement.
type policyProbes struct {
	mu   sync.Mutex
	last map[types.UID]policyProbe
}

type policyProbe struct {
	at      time.Time
	address string
	verdict probeVerdict
	detail  string
}

func (p *policyProbes) get(uid types.UID) (policyProbe, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.last[uid]
	return v, ok
}

func (p *policyProbes) put(uid types.UID, v policyProbe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[types.UID]policyProbe{}
	}
	p.last[uid] = v
}

func (p *policyProbes) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.last, uid)
}

// observeNetworkPolicy sets NetworkPolicyEnforced: measured (at most every policyProbeEvery,
// and again when the serving master moved) while the render holds the store's NetworkPolicy;
// False PolicyDisabled when it holds none; left as it was while no master serves.
func (r *Reconciler) observeNetworkPolicy(ctx context.Context, s *state) error {
	b := s.backend
	m := b.Spec.Connection.Managed
	if m == nil || len(s.rendered) == 0 {
		return nil // unmanaged, or the render failed (RenderFailed says why)
	}
	g := b.Generation
	if !rendersNetworkPolicy(s) {
		why := "spec.connection.managed.networkPolicy.enabled is false"
		if m.NetworkPolicyEnabled() {
			why = "a member group runs on the host network (rdma or efa), which a NetworkPolicy can neither select nor admit by Pod"
		}
		operator.SetCondition(&b.Status.Conditions, g, kvv1.ConditionNetworkPolicyEnforced, metav1.ConditionFalse, kvv1.ReasonPolicyDisabled,
			"the store renders no NetworkPolicy ("+why+"): every Pod the cluster's network lets through can reach it and name any tenant")
		r.policyProbes.forget(b.UID)
		return nil
	}
	addr := servingMasterAddress(s.pods, r.Renderer.Defaults().Store.RPCPort)
	if addr == "" {
		return nil
	}
	last, ok := r.policyProbes.get(b.UID)
	if !ok || last.address != addr || s.now.Sub(last.at) >= policyProbeEvery {
		dial := r.Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		pctx, cancel := context.WithTimeout(ctx, policyProbeTimeout)
		conn, err := dial(pctx, "tcp", addr)
		cancel()
		if conn != nil {
			_ = conn.Close()
		}
		v, detail := judgeProbe(err)
		last = policyProbe{at: s.now, address: addr, verdict: v, detail: detail}
		r.policyProbes.put(b.UID, last)
	}
	switch last.verdict {
	case probeEnforced:
		operator.SetConditionOnce(&b.Status.Conditions, g, kvv1.ConditionNetworkPolicyEnforced, metav1.ConditionTrue, kvv1.ReasonPolicyEnforced,
			fmt.Sprintf("the manager's probe connection to the serving master's RPC port (%s), which the store's NetworkPolicy does not admit it to, %s: the cluster enforces the policy", last.address, last.detail))
	case probeNotEnforced:
		operator.SetConditionOnce(&b.Status.Conditions, g, kvv1.ConditionNetworkPolicyEnforced, metav1.ConditionFalse, kvv1.ReasonPolicyNotEnforced,
			fmt.Sprintf("the manager's probe connection to the serving master's RPC port (%s), which the store's NetworkPolicy does not admit it to, was answered (%s): the cluster's network plugin does not enforce NetworkPolicy, so every Pod can reach this store and name any tenant", last.address, last.detail))
	}
	return nil
}

// rendersNetworkPolicy says whether the store's render holds its NetworkPolicy.
func rendersNetworkPolicy(s *state) bool {
	for _, o := range s.rendered {
		if _, ok := o.(*networkingv1.NetworkPolicy); ok {
			return true
		}
	}
	return false
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
