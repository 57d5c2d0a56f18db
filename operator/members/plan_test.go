package members

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// The lease a warm store's new master grants on what it kept is the masters' last
// -default_kv_lease_ttl, in the forms the master accepts.
func TestLeaseTTL(t *testing.T) {
	leader := func(args ...string) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Args: args}}
		return d
	}
	for _, c := range []struct {
		name string
		d    *appsv1.Deployment
		want time.Duration
	}{
		{"as rendered", leader("-rpc_port=50051", "-default_kv_lease_ttl=5m"), 5 * time.Minute},
		{"extraArgs after it win", leader("-default_kv_lease_ttl=5m", "-enable_ha=true", "-default_kv_lease_ttl=15s"), 15 * time.Second},
		{"raw milliseconds", leader("-default_kv_lease_ttl=2500"), 2500 * time.Millisecond},
		{"milliseconds", leader("-default_kv_lease_ttl=750ms"), 750 * time.Millisecond},
		{"hours", leader("-default_kv_lease_ttl=1h"), time.Hour},
		{"not given: the master's default", leader("-rpc_port=50051"), 5 * time.Second},
		{"no leader rendered", nil, 5 * time.Second},
	} {
		assert.Equal(t, c.want, leaseTTL(c.d), c.name)
	}
}

func member(name, group, hash, node, ip string, ready bool) corev1.Pod {
	p := corev1.Pod{}
	p.Name = name
	p.Labels = map[string]string{vocab.LabelComponent: group, vocab.LabelPodSpecHash: hash}
	p.Spec.NodeName = node
	p.Status.PodIP = ip
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

func group(name, component, hash string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{}
	ds.Name = name
	ds.Labels = map[string]string{vocab.LabelComponent: component}
	ds.Spec.Template.Labels = map[string]string{vocab.LabelPodSpecHash: hash}
	return ds
}

func replaced(rs []replacement) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.pod.Name+": "+r.why())
	}
	return out
}

// A group whose template moved on replaces its first stale member by name, one at a time: not
// while another member of the group is away, not ready, or being drained; groups are
// independent.
func TestOneStaleMemberPerGroupIsReplacedWhileTheRestIsReady(t *testing.T) {
	b := &kvv1.KVCacheBackend{}
	groups := []*appsv1.DaemonSet{group("s-member-0", "member-0", "new"), group("s-member-1", "member-1", "h1")}
	pods := []corev1.Pod{
		member("s-member-0-a", "member-0", "old", "n1", "10.0.0.1", true),
		member("s-member-0-b", "member-0", "old", "n2", "10.0.0.2", true),
		member("s-member-1-a", "member-1", "h1", "n1", "10.0.0.3", true),
	}
	w := world{backend: b, pods: pods, groups: groups}
	assert.Equal(t, []string{"s-member-0-a: its pod spec is stale (2 stale in s-member-0)"}, replaced(staleNext(w)))

	w.pods = append([]corev1.Pod{}, pods...)
	w.pods[1] = member("s-member-0-b", "member-0", "new", "n2", "10.0.0.2", false)
	assert.Empty(t, staleNext(w), "a member of the group is not ready: nobody else goes")

	w.pods = append([]corev1.Pod{}, pods...)
	w.pods[1].DeletionTimestamp = &metav1.Time{Time: time.Now()}
	assert.Empty(t, staleNext(w), "a member of the group is away")

	w.pods = pods
	b.Status.Drains = []kvv1.MemberDrain{{Pod: "s-member-0-b", Reason: kvv1.DrainCordoned}}
	assert.Empty(t, staleNext(w), "a member of the group is being drained")

	w.groups = []*appsv1.DaemonSet{group("s-member-0", "member-0", "old"), group("s-member-1", "member-1", "h2")}
	assert.Equal(t, []string{"s-member-1-a: its pod spec is stale (1 stale in s-member-1)"}, replaced(staleNext(w)), "the other group is independent")
}

// The store is asked for its segments only when a member may have a cordon to act on, as the
// backend last published the segments.
func TestCordonWorkIsReadFromThePublishedMembers(t *testing.T) {
	cordoned := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}
	open := &corev1.Node{}
	b := &kvv1.KVCacheBackend{}
	w := world{backend: b, pods: []corev1.Pod{member("m", "member-0", "h", "n1", "10.0.0.1", true)}, nodes: map[string]*corev1.Node{"n1": open}}
	b.Status.Members = []kvv1.MemberStatus{{Segment: "10.0.0.1:15400", Pod: "m", Status: store.SegmentOK}}
	assert.False(t, cordonWork(w), "a schedulable node's serving member")
	w.nodes["n1"] = cordoned
	assert.True(t, cordonWork(w), "a cordoned node's serving member is drained")
	b.Status.Members[0].Status = store.SegmentDrained
	assert.False(t, cordonWork(w), "a cordoned node's drained member stays")
	w.nodes["n1"] = open
	assert.True(t, cordonWork(w), "a drained member whose node is back starts again")
	b.Status.Members = nil
	assert.False(t, cordonWork(w), "a member with no segment published")
}

// A status patch that met a newer backend replays this reconcile's changes on it: a record
// another reconcile wrote meanwhile is kept, an ended one goes, a restarted one is updated.
func TestDrainsAreReplayedOnAFreshRead(t *testing.T) {
	d := func(pod, job string) kvv1.MemberDrain { return kvv1.MemberDrain{Pod: pod, JobID: job} }
	before := []kvv1.MemberDrain{d("a", "1"), d("b", "2")}
	after := []kvv1.MemberDrain{d("b", "3"), d("c", "4")}
	current := []kvv1.MemberDrain{d("a", "1"), d("b", "2"), d("z", "9")}
	assert.Equal(t, []kvv1.MemberDrain{d("b", "3"), d("c", "4"), d("z", "9")}, replayDrains(current, before, after))
	assert.Nil(t, replayDrains([]kvv1.MemberDrain{d("a", "1")}, []kvv1.MemberDrain{d("a", "1")}, nil), "the last drain ended")
}

// An IPv6 member's segment is found under the master's spelling of its address.
func TestAnIPv6MembersSegmentsAreFound(t *testing.T) {
	p := member("m-a", "member-0", "h", "n1", "fd00:0:0::7", true)
	segs := []store.Segment{{Name: "fd00::7:15001"}, {Name: "[fd00::70]:15002"}}
	assert.Equal(t, []string{"fd00::7:15001"}, store.SegmentNames(segmentsOf(segs, &p)))
}
