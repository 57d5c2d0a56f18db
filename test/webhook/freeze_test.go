package webhook_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/vocab"
)

func injectedPod(t *testing.T, name string, finalizers ...string) *corev1.Pod {
	t.Helper()
	pod := vllmPod(map[string]string{vocab.LabelInject: "true"})
	pod.Finalizers = finalizers
	p, err := create(t, pod, name)
	require.NoError(t, err)
	require.Contains(t, p.Annotations, vocab.AnnotationInjected)
	return p
}

func update(p *corev1.Pod, edit func(*corev1.Pod)) error {
	ctx := context.Background()
	fresh := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), fresh); err != nil {
		return err
	}
	edit(fresh)
	return env.Client.Update(ctx, fresh)
}

const (
	labelFault        = `label kvcache.gpustack.ai/inject changes the Pod's opt-in state ("true" to "false"), which is fixed at creation because injection runs only then; change the workload's Pod template instead, and the change takes effect when the workload rolls`
	recordEditFault   = "annotation kvcache.gpustack.ai/injected may not be edited: it records what injection decided at creation"
	configEditFault   = "annotation kvcache.gpustack.ai/client-config may not be edited: the running container reads it through a projected file, so an edit would swap the store address, transport or segment sizes under it"
	configRemoveFault = "annotation kvcache.gpustack.ai/client-config may not be removed: the running container reads it through a projected file, so an edit would swap the store address, transport or segment sizes under it"
)

func TestFreezeRefusesEveryFaultTogether(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	p := injectedPod(t, "freeze-all")
	err := update(p, func(p *corev1.Pod) {
		p.Labels[vocab.LabelInject] = "false"
		p.Annotations[vocab.AnnotationInjected] = `{"binding":"other"}`
		p.Annotations[vocab.AnnotationClientConfig] = `{"master_server_address":"evil:50051"}`
	})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `admission webhook "freeze.pods.kvcache.gpustack.ai" denied the request: `+labelFault+"; "+recordEditFault+"; "+configEditFault)

	err = update(p, func(p *corev1.Pod) { delete(p.Annotations, vocab.AnnotationClientConfig) })
	require.Error(t, err)
	assert.Contains(t, err.Error(), configRemoveFault)

	err = update(p, func(p *corev1.Pod) { delete(p.Labels, vocab.LabelInject) })
	require.Error(t, err, "removing the label is an opt-in change too (the selector matches the old object)")
	assert.Contains(t, err.Error(), `label kvcache.gpustack.ai/inject changes the Pod's opt-in state ("true" to "")`)

	require.NoError(t, update(p, func(p *corev1.Pod) { p.Annotations["team-a/owner"] = "alice" }), "other metadata edits are admitted")
}

func TestFreezeHoldsOnATerminatingPodAndAdmitsFinalizerRemoval(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	p := injectedPod(t, "freeze-terminating", "team-a.example/drain")
	require.NoError(t, env.Client.Delete(ctx, p))
	stored := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), stored))
	require.NotNil(t, stored.DeletionTimestamp, "the finalizer holds the Pod in deletion")

	err := update(p, func(p *corev1.Pod) {
		p.Annotations[vocab.AnnotationClientConfig] = `{"master_server_address":"elsewhere:50051"}`
	})
	require.Error(t, err, "the freeze covers terminating Pods")
	assert.Contains(t, err.Error(), configEditFault)

	require.NoError(t, update(p, func(p *corev1.Pod) { p.Finalizers = nil }), "finalizer removal is admitted")
	waitGone(t, p)
}

// With the webhook server down: Pods that did not opt in are unaffected (the objectSelector
// keeps them from the webhook), an opted-in Pod is refused (injection fails closed), and Pod
// updates pass (the freeze fails open).
func TestOutage(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	live := injectedPod(t, "outage-live")
	stopMgr()
	defer func() { require.NoError(t, startManager()) }()

	for i := range 100 {
		_, err := create(t, vllmPod(nil), fmt.Sprintf("outage-plain-%d", i))
		require.NoError(t, err, "unlabelled Pod %d", i)
	}
	_, err := create(t, vllmPod(map[string]string{vocab.LabelInject: "true"}), "outage-labelled")
	require.Error(t, err, "injection fails closed")
	assert.Contains(t, err.Error(), `failed calling webhook "inject.pods.kvcache.gpustack.ai"`)
	assert.True(t, apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKey{Namespace: userNamespace, Name: "outage-labelled"}, &corev1.Pod{})))

	require.NoError(t, update(live, func(p *corev1.Pod) {
		p.Annotations[vocab.AnnotationClientConfig] = `{"edited":"while the webhook is down"}`
	}), "the freeze fails open")
}

// renderedPod is a Pod as a ModelDeployment's ReplicaSet would create it from the rendered
// Deployment's template (the golden render): the written keys without the opt-in label.
func renderedPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(golden.Dir("modeldeployment"), "vllm-server-x2.yaml"))
	require.NoError(t, err)
	var d *appsv1.Deployment
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		o := &appsv1.Deployment{}
		if yaml.Unmarshal([]byte(doc), o) == nil && o.Kind == "Deployment" {
			d = o
		}
	}
	require.NotNil(t, d, "the golden holds a Deployment")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations}, Spec: d.Spec.Template.Spec}
	require.NotContains(t, pod.Labels, vocab.LabelInject)
	require.Contains(t, pod.Annotations, vocab.AnnotationClientConfig)
	p, err := create(t, pod, name)
	require.NoError(t, err)
	return p
}

// A ModelDeployment's Pods are frozen like injected ones, through their own label: the client
// configuration cannot be swapped under the running engine, nor the label removed to unfreeze it.
func TestFreezeCoversPodsRenderedForAModelDeployment(t *testing.T) {
	p := renderedPod(t, "rendered-freeze")
	err := update(p, func(p *corev1.Pod) {
		p.Annotations[vocab.AnnotationClientConfig] = `{"master_server_address":"evil:50051"}`
	})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `admission webhook "freeze-rendered.pods.kvcache.gpustack.ai" denied the request: `+configEditFault)

	err = update(p, func(p *corev1.Pod) { delete(p.Labels, vocab.LabelModelDeployment) })
	require.Error(t, err, "the label that selects the freeze is frozen too")
	assert.Contains(t, err.Error(), `label kvcache.gpustack.ai/model-deployment names the ModelDeployment the Pod was rendered for ("qwen-chat" to "")`)

	require.NoError(t, update(p, func(p *corev1.Pod) { p.Annotations["team-a/owner"] = "alice" }), "other metadata edits are admitted")
}
