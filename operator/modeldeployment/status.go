package modeldeployment

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/enginestats"
)

func set(md *kvv1.ModelDeployment, t string, status metav1.ConditionStatus, reason, msg string) {
	operator.SetCondition(&md.Status.Conditions, md.Generation, t, status, reason, msg)
}

// setStatus computes the deployment's status from what the reconcile observed.
func setStatus(s *state, refresh time.Duration) {
	md := s.md
	md.Status.Roles = generator.RolesSummary(md)
	setRollout(s)
	setCacheAttached(s)
	setStoreHits(s, refresh)
	switch {
	case s.renderErr != nil || s.taken != "" || s.refusal != nil:
		md.Status.Phase = kvv1.PhaseDegraded
	case meta.IsStatusConditionTrue(md.Status.Conditions, kvv1.ConditionRolloutComplete):
		md.Status.Phase = kvv1.PhaseReady
	default:
		md.Status.Phase = kvv1.PhaseProvisioning
	}
}

// enginesWindow is the engines' window, nil when no engine Pod was read.
func (s *state) enginesWindow() *enginestats.Window {
	if !s.enginesRead || s.engines.Pods == 0 {
		return nil
	}
	return &s.engines
}

// setStoreHits publishes what the deployment's engines counted (rate-limited as a Binding's);
// without a cache, or before any Pod was read, there is nothing to say.
func setStoreHits(s *state, refresh time.Duration) {
	if s.md.Spec.KVCache == nil || !s.enginesRead {
		if s.md.Spec.KVCache == nil {
			s.md.Status.StoreHits = nil
		}
		return
	}
	s.md.Status.StoreHits = operator.RefreshStoreHits(s.md.Status.StoreHits, operator.StoreHitsOf(s.engines, s.now), s.now, refresh)
}

func setRollout(s *state) {
	md := s.md
	if s.renderErr != nil {
		set(md, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonRenderFailed, s.renderErr.Error())
		return
	}
	if s.taken != "" {
		set(md, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonNameTaken, s.taken)
		return
	}
	if len(s.deploys) < len(md.Spec.Roles) {
		set(md, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonNotCreated, fmt.Sprintf("%d of %d role Deployments exist", len(s.deploys), len(md.Spec.Roles)))
		return
	}
	for _, d := range s.deploys {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
			set(md, kvv1.ConditionRolloutComplete, metav1.ConditionFalse, kvv1.ReasonProgressing,
				fmt.Sprintf("%s: %d of %d replicas updated and available", d.Name, min(d.Status.UpdatedReplicas, d.Status.AvailableReplicas), want))
			return
		}
	}
	set(md, kvv1.ConditionRolloutComplete, metav1.ConditionTrue, kvv1.ReasonComplete, "every role runs its current template on all replicas")
}

// setCacheAttached says whether the cache is attached, from observation: Ready Pods and writes
// under the tenant seen by the master after they became Ready (operator.CacheUse). False once
// they have been Ready for the window with no write; configuration alone never makes it True.
// No figure is in the message: figures move with every write, the condition only with the
// verdict.
func setCacheAttached(s *state) {
	md := s.md
	if md.Spec.KVCache == nil {
		md.Status.KVCache = nil
		set(md, kvv1.ConditionCacheAttached, metav1.ConditionFalse, kvv1.ReasonNoCacheRequested, "spec.kvCache is not set: the deployment runs with no shared cache")
		return
	}
	if s.refusal != nil {
		md.Status.KVCache = nil
		if a := s.attachment; a != nil && a.Binding != nil {
			md.Status.KVCache = &kvv1.ModelDeploymentCacheStatus{Binding: a.Binding.Name, Domain: a.Domain}
			if a.Pool != nil {
				md.Status.KVCache.Pool = a.Pool.Name
			}
		}
		set(md, kvv1.ConditionCacheAttached, metav1.ConditionFalse, s.refusal.Reason, s.refusal.Message)
		return
	}
	a := s.attachment
	md.Status.KVCache = &kvv1.ModelDeploymentCacheStatus{Binding: a.Binding.Name, Pool: a.Pool.Name, Domain: a.Domain}
	var ready int32
	for _, d := range s.deploys {
		ready += d.Status.ReadyReplicas
	}
	switch {
	case ready == 0:
		set(md, kvv1.ConditionCacheAttached, metav1.ConditionUnknown, kvv1.ReasonNoReplicaReady, "configured through "+describe(a)+"; no replica is ready yet, so nothing can use the cache")
		return
	case !a.TenantLedger:
		set(md, kvv1.ConditionCacheAttached, metav1.ConditionUnknown, kvv1.ReasonNoObservationAvailable,
			fmt.Sprintf("%d replica(s) ready; KVCacheBackend %s keeps no tenant ledger, so the store cannot show this domain's writes", ready, a.Backend.Name))
		return
	case len(s.pods) == 0:
		set(md, kvv1.ConditionCacheAttached, metav1.ConditionUnknown, kvv1.ReasonNoObservationAvailable,
			fmt.Sprintf("%d replica(s) ready; their Pods are not seen yet, so whether they write under tenant %s is not known", ready, a.Domain))
		return
	}
	// The same verdict as the Binding's CacheInUse, over this deployment's Pods alone.
	v := operator.CacheUse(operator.CacheUseInput{
		Now: s.now, Window: s.window, Tenant: a.Domain, Backend: a.Backend.Name, StoreImage: s.storeImage,
		Pods: s.pods, Observed: s.activityKnown, Activity: s.activity,
		Prev:    meta.FindStatusCondition(md.Status.Conditions, kvv1.ConditionCacheAttached),
		Engines: s.enginesWindow(), BlockSize: a.Binding.Spec.Domain.BlockSize,
	})
	s.recheck = v.RecheckAfter
	if v.Keep {
		return
	}
	set(md, kvv1.ConditionCacheAttached, v.Status, v.Reason, v.Message)
}
