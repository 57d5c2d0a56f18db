package backend

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/vocab"
)

// completeHandover ends a leader rollout with standbys in one graceful handover. The rollout
// strategy (maxUnavailable: replicas - 1, maxSurge: 1) lets the Deployment controller replace
// every standby (they are never ready, so never "available") and stops it at the serving
// leader, the one available Pod. Once every other leader Pod runs the new template and its
// launcher campaigns for the Lease, the old ReplicaSet is scaled to zero: its Pod, the serving
// leader, stops gracefully, its launcher releases the Lease, and an updated standby takes over
// within seconds. Deleting the Pod instead would let its ReplicaSet start an old one again,
// which could win the Lease and make a second handover. The master that takes over starts
// empty (cold cache); the event says so. With warm failover the serving leader is the ready Pod
// and the standbys run masters that follow the operation log: the one that takes over keeps
// the cache.
func (r *Reconciler) completeHandover(ctx context.Context, s *state) error {
	b := s.backend
	d := renderedLeader(s)
	if d == nil || d.Spec.Replicas == nil || *d.Spec.Replicas <= 1 || s.replicasHeld > 0 || r.APIReader == nil {
		return nil
	}
	want := d.Spec.Template.Labels[vocab.LabelPodSpecHash]
	var old, updated []corev1.Pod
	for _, p := range s.pods {
		if p.Labels[vocab.LabelComponent] != vocab.ComponentLeader {
			continue
		}
		if !p.DeletionTimestamp.IsZero() {
			return nil // a leader Pod is already stopping: let it finish first
		}
		if p.Labels[vocab.LabelPodSpecHash] == want {
			updated = append(updated, p)
		} else {
			old = append(old, p)
		}
	}
	warm := warm(b)
	if len(old) != 1 || !serving(&old[0], warm) || int32(len(updated)) < *d.Spec.Replicas-1 {
		return nil // the controller is still replacing standbys, or the leader runs the new template
	}
	for _, p := range updated {
		if !standingBy(&p, warm) {
			return nil
		}
	}
	rs := ownerReplicaSet(&old[0])
	if rs == "" {
		return nil
	}
	key := types.NamespacedName{Namespace: r.SystemNamespace, Name: rs}
	live := &appsv1.ReplicaSet{}
	if err := r.APIReader.Get(ctx, key, live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if live.Spec.Replicas != nil && *live.Spec.Replicas == 0 {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
	if err := r.Client.Patch(ctx, live, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	if warm {
		r.Recorder.Eventf(b, &old[0], corev1.EventTypeNormal, "LeaderHandover", "Rollout",
			"the new leader Pod template runs on every standby (%d); handing over once from the serving leader %s: it stops, its claim in etcd runs out, and an updated standby takes over with the index it replayed from the operation log (warm: the objects cached before stay)",
			len(updated), old[0].Name)
	} else {
		r.Recorder.Eventf(b, &old[0], corev1.EventTypeNormal, "LeaderHandover", "Rollout",
			"the new leader Pod template runs on every standby (%d); handing over once from the serving leader %s: it stops gracefully and releases the Lease, and an updated standby takes over. The master that takes over starts empty: every object cached before misses (cold cache)",
			len(updated), old[0].Name)
	}
	set(b, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonHandover,
		fmt.Sprintf("handing over from %s, the last leader Pod on the previous template, to an updated standby", old[0].Name))
	return nil
}

// renderedLeader is the leader Deployment of the render (nil without one).
func renderedLeader(s *state) *appsv1.Deployment {
	for _, o := range s.rendered {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == generator.LeaderName(s.backend.Name) {
			return d
		}
	}
	return nil
}

// serving reports whether a leader Pod runs the serving master: its launcher labelled it
// store-leader=true, or (warm failover, no launcher) it is ready, which only the serving master
// is (a standby's segment listing answers 503).
func serving(p *corev1.Pod, warm bool) bool {
	if warm {
		return podReady(p)
	}
	return p.Labels[vocab.LabelStoreLeader] == "true"
}

// standingBy reports whether a leader Pod stands by to take over: its launcher runs and
// campaigns for the Lease (it labels its own Pod store-leader=false), or (warm failover) its
// master runs as a standby, which replays the operation log as it comes and the rest of it
// when it is promoted.
func standingBy(p *corev1.Pod, warm bool) bool {
	if p.Status.Phase != corev1.PodRunning || (!warm && p.Labels[vocab.LabelStoreLeader] != "false") || (warm && podReady(p)) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == leaderContainer {
			return c.Started != nil && *c.Started
		}
	}
	return false
}

// leaderContainer is the leader Pod's container (templates/store/leader-deployment.yaml).
const leaderContainer = "leader"

func ownerReplicaSet(p *corev1.Pod) string {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "ReplicaSet" && ref.Controller != nil && *ref.Controller {
			return ref.Name
		}
	}
	return ""
}
