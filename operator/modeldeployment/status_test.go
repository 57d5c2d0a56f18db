package modeldeployment

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/injection"
)

func deployment(name string, replicas, updated, available, ready int32) appsv1.Deployment {
	return appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 1, UpdatedReplicas: updated, AvailableReplicas: available, ReadyReplicas: ready},
	}
}

func chat(cache bool) *kvv1.ModelDeployment {
	md := &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "team-a", Generation: 4}}
	md.Spec.Engine.Name = kvv1.EngineVLLM
	md.Spec.Roles = []kvv1.Role{{Name: "server", Replicas: ptr.To[int32](2)}}
	if cache {
		md.Spec.KVCache = &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "team-a"}}
	}
	return md
}

func attached(ledger bool) *injection.Attachment {
	return &injection.Attachment{
		Binding:      &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: "team-a"}},
		Pool:         &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "shared-dram"}},
		Backend:      &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "mooncake-dram"}},
		Domain:       "default",
		TenantLedger: ledger,
	}
}

func cond(md *kvv1.ModelDeployment, t string) metav1.Condition {
	if c := meta.FindStatusCondition(md.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// What the deployment's status says, computed from what a reconcile observed, with no cluster.
func TestStatusSaysWhatWasObserved(t *testing.T) {
	cases := []struct {
		name                  string
		state                 state
		phase                 kvv1.Phase
		rollout, attach       string // reasons
		attachStatus          metav1.ConditionStatus
		attachMessageContains string
	}{
		{"no cache requested, rolled out", state{md: chat(false), deploys: []appsv1.Deployment{deployment("chat-server", 2, 2, 2, 2)}},
			kvv1.PhaseReady, kvv1.ReasonComplete, kvv1.ReasonNoCacheRequested, metav1.ConditionFalse, "spec.kvCache is not set"},
		{"a role's Deployment not created yet", state{md: chat(false)},
			kvv1.PhaseProvisioning, kvv1.ReasonNotCreated, kvv1.ReasonNoCacheRequested, metav1.ConditionFalse, ""},
		{"rolling out", state{md: chat(true), attachment: attached(true), deploys: []appsv1.Deployment{deployment("chat-server", 2, 1, 2, 0)}},
			kvv1.PhaseProvisioning, kvv1.ReasonProgressing, kvv1.ReasonNoReplicaReady, metav1.ConditionUnknown, "no replica is ready yet"},
		{"the Binding refused", state{md: chat(true), attachment: attached(true), refusal: &injection.Refusal{Reason: "BindingNotFound", Message: "KVCachePoolBinding team-a/team-a not found"},
			deploys: []appsv1.Deployment{deployment("chat-server", 2, 2, 2, 2)}},
			kvv1.PhaseDegraded, kvv1.ReasonComplete, "BindingNotFound", metav1.ConditionFalse, "not found"},
		{"a store without a ledger cannot show writes", state{md: chat(true), attachment: attached(false), deploys: []appsv1.Deployment{deployment("chat-server", 2, 2, 2, 2)}},
			kvv1.PhaseReady, kvv1.ReasonComplete, kvv1.ReasonNoObservationAvailable, metav1.ConditionUnknown, "keeps no tenant ledger"},
		{"the render failed", state{md: chat(false), renderErr: errors.New("role server: no such InstanceType")},
			kvv1.PhaseDegraded, kvv1.ReasonRenderFailed, kvv1.ReasonNoCacheRequested, metav1.ConditionFalse, ""},
		{"a role's name is another's", state{md: chat(false), taken: "Deployment chat-server, which role server renders, already exists and belongs to ModelDeployment chat",
			deploys: []appsv1.Deployment{deployment("chat-server", 2, 2, 2, 2)}},
			kvv1.PhaseDegraded, kvv1.ReasonNameTaken, kvv1.ReasonNoCacheRequested, metav1.ConditionFalse, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.state
			s.now = time.Unix(1_800_000_000, 0)
			setStatus(&s, time.Minute)
			md := s.md
			assert.Equal(t, tc.phase, md.Status.Phase)
			assert.Equal(t, tc.rollout, cond(md, kvv1.ConditionRolloutComplete).Reason)
			c := cond(md, kvv1.ConditionCacheAttached)
			assert.Equal(t, tc.attach, c.Reason)
			assert.Equal(t, tc.attachStatus, c.Status)
			assert.Contains(t, c.Message, tc.attachMessageContains)
			assert.Equal(t, int64(4), c.ObservedGeneration)
			if md.Spec.KVCache == nil {
				assert.Nil(t, md.Status.KVCache)
				assert.Nil(t, md.Status.StoreHits)
			}
		})
	}
}

func TestARolloutNamesTheRoleBehind(t *testing.T) {
	s := state{md: chat(false), deploys: []appsv1.Deployment{deployment("chat-server", 3, 3, 1, 1)}}
	setRollout(&s)
	assert.Equal(t, "chat-server: 1 of 3 replicas updated and available", cond(s.md, kvv1.ConditionRolloutComplete).Message)
}
