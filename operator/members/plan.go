package members

import (
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The choices here are pure functions of what one reconcile read: which member of a group is
// replaced next, which members of cordoned nodes are drained, which drained members start
// again, and the time bounds a drain works within. The controller carries them out.

// world is what one reconcile read of the cluster: the backend, its member Pods (sorted by
// name), its member DaemonSets as they run, its leader Deployment as it runs, and the Nodes the
// members run on.
type world struct {
	backend *kvv1.KVCacheBackend
	now     time.Time
	pods    []corev1.Pod
	groups  []*appsv1.DaemonSet
	leader  *appsv1.Deployment
	nodes   map[string]*corev1.Node
}

// staleNext is, for each member group whose DaemonSet's pod template moved on, the member Pod
// replaced next: the first stale one by name, while no member of the group is away (being
// deleted, not ready, or in drains) and none is being drained. A group with nothing to do is
// absent. why says what the Pod's replacement is for.
func staleNext(w world) []replacement {
	busy := busyGroups(w)
	var out []replacement
	for _, ds := range w.groups {
		want := ds.Spec.Template.Labels[vocab.LabelPodSpecHash]
		group := ds.Labels[vocab.LabelComponent]
		var stale []*corev1.Pod
		allReady := true
		for i := range w.pods {
			p := &w.pods[i]
			if memberGroup(p) != group {
				continue
			}
			if !p.DeletionTimestamp.IsZero() {
				allReady = false // a member is already away
				continue
			}
			if p.Labels[vocab.LabelPodSpecHash] != want {
				stale = append(stale, p)
			} else if !podReady(p) {
				allReady = false
			}
		}
		if len(stale) == 0 || !allReady || busy[group] {
			continue
		}
		out = append(out, replacement{pod: stale[0], group: ds.Name, stale: len(stale)})
	}
	return out
}

// replacement is a stale member to replace, and how many of its group are stale.
type replacement struct {
	pod   *corev1.Pod
	group string
	stale int
}

func (r replacement) why() string {
	return "its pod spec is stale (" + strconv.Itoa(r.stale) + " stale in " + r.group + ")"
}

// busyGroups are the groups with a member in drains.
func busyGroups(w world) map[string]bool {
	busy := map[string]bool{}
	for _, d := range w.backend.Status.Drains {
		if p := podNamed(w.pods, d.Pod); p != nil {
			busy[memberGroup(p)] = true
		}
	}
	return busy
}

// cordonWork says whether some member may have a cordon to act on, from what the backend last
// published of the store (status.members): a member of a cordoned node whose segments are not
// all drained, or a drained member whose node is schedulable again. Only then is the store
// asked for its segments, so a steady store is never read for this.
func cordonWork(w world) bool {
	for i := range w.pods {
		p := &w.pods[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		var segs, drained int
		for _, m := range w.backend.Status.Members {
			if m.Pod == p.Name {
				segs++
				if m.Status == store.SegmentDrained {
					drained++
				}
			}
		}
		if segs == 0 {
			continue
		}
		node := w.nodes[p.Spec.NodeName]
		cordoned := node != nil && node.Spec.Unschedulable
		if cordoned && drained < segs || !cordoned && node != nil && drained == segs {
			return true
		}
	}
	return false
}

// leasesAfterFailover is when the leases end that the new master of a warm store's last failover
// granted on every object it kept (measured: a drain's units stay blocked for exactly
// default_kv_lease_ttl after it takes over); zero for a store that fails over cold or never did.
func leasesAfterFailover(w world) time.Time {
	b := w.backend
	l := b.Status.Leader
	if m := b.Spec.Connection.Managed; m == nil || !m.Leader.Warm() || l == nil || l.LastFailover == nil || l.LastFailover.Mode != kvv1.FailoverWarm {
		return time.Time{}
	}
	return l.LastFailover.Time.Add(leaseTTL(w.leader))
}

// leaseTTL is the masters' -default_kv_lease_ttl as they run (the last one given wins): raw
// milliseconds, or a number with one unit of ms, s, m or h. A leader whose value does not parse
// counts the master's own default, 5 s.
func leaseTTL(d *appsv1.Deployment) time.Duration {
	const flag, masterDefault = "-default_kv_lease_ttl=", 5 * time.Second
	ttl := masterDefault
	if d == nil || len(d.Spec.Template.Spec.Containers) == 0 {
		return ttl
	}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		v, ok := strings.CutPrefix(a, flag)
		if !ok {
			continue
		}
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			ttl = time.Duration(ms) * time.Millisecond
		} else if t, err := time.ParseDuration(v); err == nil {
			ttl = t
		} else {
			ttl = masterDefault
		}
	}
	return ttl
}

// drainTimeout is the drainTimeout of the member's group.
func drainTimeout(b *kvv1.KVCacheBackend, p *corev1.Pod) time.Duration {
	i, err := strconv.Atoi(strings.TrimPrefix(memberGroup(p), vocab.MemberComponentPrefix))
	m := b.Spec.Connection.Managed
	if err != nil || m == nil || i < 0 || i >= len(m.Members) {
		return kvv1.DefaultDrainTimeout
	}
	return m.Members[i].DrainTimeoutOrDefault()
}

func memberGroup(p *corev1.Pod) string { return p.Labels[vocab.LabelComponent] }

func podNamed(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func drainOf(b *kvv1.KVCacheBackend, pod string) *kvv1.MemberDrain {
	for i := range b.Status.Drains {
		if b.Status.Drains[i].Pod == pod {
			return &b.Status.Drains[i]
		}
	}
	return nil
}
