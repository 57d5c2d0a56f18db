package backend

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/vocab"
)

func leaderPod(name, hash, leading, rs string, started bool) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "gpustack-system", Labels: map[string]string{
			vocab.LabelComponent: vocab.ComponentLeader, vocab.LabelPodSpecHash: hash, vocab.LabelStoreLeader: leading,
		}, OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs, Controller: ptr.To(true)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: leaderContainer, Started: ptr.To(started)}}},
	}
}

// A leader rollout with standbys ends in exactly one handover, and only once every standby runs
// the new template and campaigns: then the ReplicaSet of the serving leader goes to zero.
func TestHandoverWaitsForEveryStandbyThenScalesTheOldLeaderAway(t *testing.T) {
	s, err := generator.NewScheme()
	require.NoError(t, err)
	b := managedBackend()
	b.Spec.Connection.Managed.Leader.Replicas = ptr.To[int32](3)
	rendered := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: generator.LeaderName(b.Name), Namespace: "gpustack-system"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)}}
	rendered.Spec.Template.Labels = map[string]string{vocab.LabelPodSpecHash: "new"}
	warmLeader := func(name, hash string, ready bool, rs string, started bool) corev1.Pod {
		p := leaderPod(name, hash, "", rs, started)
		delete(p.Labels, vocab.LabelStoreLeader)
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		return p
	}
	cases := []struct {
		name     string
		warm     bool
		pods     []corev1.Pod
		handover bool
	}{
		{"warm: every standby master updated and started: hand over once from the ready one", true, []corev1.Pod{
			warmLeader("l-old", "old", true, "leader-old", true), warmLeader("l-a", "new", false, "leader-new", true), warmLeader("l-b", "new", false, "leader-new", true),
		}, true},
		{"warm: a standby master has not started: wait", true, []corev1.Pod{
			warmLeader("l-old", "old", true, "leader-old", true), warmLeader("l-a", "new", false, "leader-new", true), warmLeader("l-b", "new", false, "leader-new", false),
		}, false},
		{"warm: the previous template's Pod is not the serving one: nothing to hand over", true, []corev1.Pod{
			warmLeader("l-old", "old", false, "leader-old", true), warmLeader("l-a", "new", true, "leader-new", true), warmLeader("l-b", "new", false, "leader-new", true),
		}, false},
		{"every standby updated and campaigning: hand over once", false, []corev1.Pod{
			leaderPod("l-old", "old", "true", "leader-old", true), leaderPod("l-a", "new", "false", "leader-new", true), leaderPod("l-b", "new", "false", "leader-new", true),
		}, true},
		{"a standby has not started: wait", false, []corev1.Pod{
			leaderPod("l-old", "old", "true", "leader-old", true), leaderPod("l-a", "new", "false", "leader-new", true), leaderPod("l-b", "new", "false", "leader-new", false),
		}, false},
		{"a standby of the previous template is still there: the controller is not done", false, []corev1.Pod{
			leaderPod("l-old", "old", "true", "leader-old", true), leaderPod("l-old2", "old", "false", "leader-old", true), leaderPod("l-a", "new", "false", "leader-new", true),
		}, false},
		{"the serving leader runs the new template already: nothing to hand over", false, []corev1.Pod{
			leaderPod("l-old", "old", "false", "leader-old", true), leaderPod("l-a", "new", "true", "leader-new", true), leaderPod("l-b", "new", "false", "leader-new", true),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "leader-old", Namespace: "gpustack-system"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1)}}
			cl := fake.NewClientBuilder().WithScheme(s).WithObjects(old).Build()
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: cl, APIReader: cl, Recorder: rec, SystemNamespace: "gpustack-system"}
			st := &state{backend: b.DeepCopy(), rendered: []generator.Object{rendered}, pods: c.pods}
			if c.warm {
				st.backend.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionEtcd
			}
			require.NoError(t, r.completeHandover(context.Background(), st))
			got := &appsv1.ReplicaSet{}
			require.NoError(t, cl.Get(context.Background(), client.ObjectKeyFromObject(old), got))
			if !c.handover {
				assert.Equal(t, int32(1), *got.Spec.Replicas)
				assert.Empty(t, rec.Events)
				return
			}
			assert.Equal(t, int32(0), *got.Spec.Replicas, "the serving leader's ReplicaSet is scaled to zero")
			require.Len(t, rec.Events, 1)
			ev := <-rec.Events
			assert.Contains(t, ev, "LeaderHandover")
			if c.warm {
				assert.Contains(t, ev, "takes over with the index it replayed from the operation log (warm")
			} else {
				assert.Contains(t, ev, "(cold cache)")
			}
			// Once it is stopping, nothing more is done.
			c.pods[0].DeletionTimestamp = ptr.To(metav1.Now())
			require.NoError(t, r.completeHandover(context.Background(), st))
			assert.Empty(t, rec.Events)
		})
	}
}
