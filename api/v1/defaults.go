package v1

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A member group's drainTimeout: its schema default and the range validation allows, and the
// margin its Pods' terminationGracePeriodSeconds adds to it, for the member's own exit once the
// hook returned (1-4.5 s after SIGTERM, measured) with room to spare under load; the hook itself
// returns at its deadline (every call to the master is bounded by it).
const (
	DefaultDrainTimeout = 5 * time.Minute
	MinDrainTimeout     = 10 * time.Second
	MaxDrainTimeout     = time.Hour
	DrainGraceMargin    = 20 * time.Second
)

// The Default methods fill exactly the fields the CRD schema defaults (the +kubebuilder:default
// markers), so an object decoded from a file behaves as the API server would store it. A test
// in the envtest suite compares the two.

// Default fills schema defaults of a KVCacheBackend.
func (b *KVCacheBackend) Default() {
	s := &b.Spec
	if s.Type == "" {
		s.Type = BackendTypeMooncake
	}
	if s.Transport.Protocol == "" {
		s.Transport.Protocol = ProtocolAuto
	}
	m := s.Connection.Managed
	if m == nil {
		return
	}
	if m.OperatorUpdates == "" {
		m.OperatorUpdates = OperatorUpdatesDeferred
	}
	if m.NetworkPolicy.Enabled == nil {
		m.NetworkPolicy.Enabled = ptr.To(true)
	}
	l := &m.Leader
	if l.Replicas == nil {
		l.Replicas = ptr.To[int32](1)
	}
	if l.ElectionBackend == "" {
		l.ElectionBackend = ElectionKubernetes
	}
	if l.MemberAddressing == "" {
		l.MemberAddressing = AddressingService
	}
	if l.MultiTenancy == nil {
		l.MultiTenancy = ptr.To(true)
	}
	if l.AllocationStrategy == "" {
		l.AllocationStrategy = AllocationFreeRatioFirst
	}
	for i := range m.Members {
		g := &m.Members[i]
		if g.Medium == "" {
			g.Medium = MediumDRAM
		}
		if g.FabricInterfaceCount == nil {
			g.FabricInterfaceCount = ptr.To[int32](1)
		}
		if g.Transport != nil && g.Transport.Protocol == "" {
			g.Transport.Protocol = ProtocolAuto
		}
		if g.DrainTimeout == nil {
			g.DrainTimeout = &metav1.Duration{Duration: DefaultDrainTimeout}
		}
	}
}

// DrainTimeoutOrDefault is the group's drainTimeout, with the schema default applied.
func (g *MemberGroup) DrainTimeoutOrDefault() time.Duration {
	if g.DrainTimeout == nil {
		return DefaultDrainTimeout
	}
	return g.DrainTimeout.Duration
}

// Default fills schema defaults of a KVCachePoolBinding.
func (b *KVCachePoolBinding) Default() {
	if b.Spec.Domain.Name == "" {
		b.Spec.Domain.Name = DefaultDomainName
	}
}

// DomainName is the domain the Binding registers, with the schema default applied (an object
// read before the API server defaulted it, e.g. from a file, may leave it out).
func (b *KVCachePoolBinding) DomainName() string {
	if b.Spec.Domain.Name == "" {
		return DefaultDomainName
	}
	return b.Spec.Domain.Name
}

// Default fills schema defaults of a ModelDeployment.
func (d *ModelDeployment) Default() {
	for i := range d.Spec.Roles {
		r := &d.Spec.Roles[i]
		if r.Kind == "" {
			r.Kind = RoleServer
		}
		if r.Replicas == nil {
			r.Replicas = ptr.To[int32](1)
		}
	}
}

// Default does nothing: a KVCachePool has no schema defaults. It exists so every kind of this
// API can be defaulted the same way.
func (p *KVCachePool) Default() {}

// Default does nothing: an InstanceType has no schema defaults.
func (t *InstanceType) Default() {}

// Default does nothing: a Setting has no schema defaults.
func (s *Setting) Default() {}

// LeaseElection reports whether the leader replicas elect through the Kubernetes Lease (the
// operator's launcher). A warm store (Etcd) elects too, through the masters' own etcd election,
// and has no Lease: see Warm.
func (l *Leader) LeaseElection() bool {
	return l.ElectionBackend != ElectionNone && l.ElectionBackend != ElectionEtcd
}

// Warm reports whether the masters keep their index through a change of leader (electionBackend
// Etcd).
func (l *Leader) Warm() bool {
	return l.ElectionBackend == ElectionEtcd
}

// Failover is what a change of leader does to the cache.
func (l *Leader) Failover() FailoverMode {
	if l.Warm() {
		return FailoverWarm
	}
	return FailoverCold
}

// NetworkPolicyEnabled reports whether the store's NetworkPolicy is rendered (default true).
func (m *ManagedConnection) NetworkPolicyEnabled() bool {
	return m.NetworkPolicy.Enabled == nil || *m.NetworkPolicy.Enabled
}

// MultiTenancyEnabled reports whether the master keeps a tenant quota ledger (default true).
func (l *Leader) MultiTenancyEnabled() bool {
	return l.MultiTenancy == nil || *l.MultiTenancy
}

// ReplicaCount is the leader replica count (default 1).
func (l *Leader) ReplicaCount() int32 {
	if l.Replicas == nil {
		return 1
	}
	return *l.Replicas
}

// EffectiveProtocol is the API protocol a member group offers: its own override, else the
// backend's, else Auto.
func (b *KVCacheBackend) EffectiveProtocol(group int) TransportProtocol {
	if m := b.Spec.Connection.Managed; m != nil && group < len(m.Members) {
		if t := m.Members[group].Transport; t != nil && t.Protocol != "" {
			return t.Protocol
		}
	}
	if b.Spec.Transport.Protocol != "" {
		return b.Spec.Transport.Protocol
	}
	return ProtocolAuto
}

// StoreImage resolves the image of member group i (i < 0: the leader): the group's own image,
// then spec.image, then the Setting kv-cache-backend-image's value. "" means none resolves.
func (b *KVCacheBackend) StoreImage(group int, setting string) string {
	if m := b.Spec.Connection.Managed; m != nil && group >= 0 && group < len(m.Members) && m.Members[group].Image != "" {
		return m.Members[group].Image
	}
	if b.Spec.Image != "" {
		return b.Spec.Image
	}
	return setting
}

// BackendName is the one backend a pool divides, or "" when it does not name exactly one
// (admission refuses such a pool).
func (p *KVCachePool) BackendName() string {
	if len(p.Spec.Backends) != 1 {
		return ""
	}
	return p.Spec.Backends[0]
}

// IsOn reports whether a pool names backend: its Bindings register their domains on that
// backend's master, and the backend is kept while the pool exists.
func (p *KVCachePool) IsOn(backend string) bool { return slices.Contains(p.Spec.Backends, backend) }
