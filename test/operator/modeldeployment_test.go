package operator_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	sigsyaml "sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/operator"
	"github.com/kvcache-operator/kvcache/operator/modeldeployment"
	"github.com/kvcache-operator/kvcache/store/storetest"
	"github.com/kvcache-operator/kvcache/vocab"
)

func eventuallyMD(t *testing.T, name, what string, f func(md *kvv1.ModelDeployment) bool) *kvv1.ModelDeployment {
	t.Helper()
	md := &kvv1.ModelDeployment{}
	poll(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: name}, md) == nil && f(md)
	}, func() string { return fmt.Sprintf("ModelDeployment %s: %s; last status: %+v", name, what, md.Status) })
	return md
}

// rolePods creates the Pods a role Deployment's ReplicaSet would, from its template, and
// reports them Ready as the kubelet would.
func rolePods(t *testing.T, name string) []string {
	t.Helper()
	ctx := context.Background()
	d := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, d))
	var names []string
	for i := range *d.Spec.Replicas {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("%s-%d", name, i), Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
			Spec:       *d.Spec.Template.Spec.DeepCopy(),
		}
		require.NoError(t, env.Client.Create(ctx, p))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
		setReady(t, p)
		names = append(names, p.Name)
	}
	return names
}

// markReady sets a role Deployment's status as the Deployment controller and kubelet would.
func markReady(t *testing.T, name string) {
	t.Helper()
	d := &appsv1.Deployment{}
	require.Eventually(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: name}, d) == nil
	}, wait, 100*time.Millisecond)
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	require.NoError(t, env.Client.Status().Update(context.Background(), d))
}

// Step 3 of the walkthrough: the roles render with owner references, the status echoes the
// Binding, the Binding lists the deployment, and CacheAttached turns True only once a replica
// is ready and the store shows the tenant's usage. A removed role is pruned; deleting the
// deployment releases the Binding.
func TestModelDeploymentAttachesThroughItsBinding(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "md-store", storetest.FakeOptions{MultiTenancy: true})
	fake.MountSegment("10.4.0.10:15400", 16<<30, "tcp")
	create(t, walkthroughBackend("md-store"))
	create(t, pool("md-pool", "md-store", "16Gi"))
	create(t, binding("team-a", "chat", "md-pool", "team-a-chat", "8Gi"))
	eventuallyBinding(t, "team-a", "chat", "Granted", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
	})
	md := &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "qwen-chat"}, Spec: kvv1.ModelDeploymentSpec{
		Model: kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"}, Engine: kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
		KVCache: &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "chat"}},
		Roles:   []kvv1.Role{{Name: "server", Replicas: ptr.To[int32](2)}, {Name: "canary"}},
	}}
	require.NoError(t, env.Client.Create(ctx, md))

	got := eventuallyMD(t, "qwen-chat", "NoReplicaReady", func(md *kvv1.ModelDeployment) bool {
		return condition(md.Status.Conditions, kvv1.ConditionCacheAttached).Reason == "NoReplicaReady"
	})
	assert.Equal(t, &kvv1.ModelDeploymentCacheStatus{Binding: "chat", Pool: "md-pool", Domain: "team-a-chat"}, got.Status.KVCache)
	assert.Equal(t, "3S", got.Status.Roles)
	d := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat-server"}, d))
	assert.True(t, metav1.IsControlledBy(d, get(t, md)), "the role Deployment is owned by the ModelDeployment")
	c := d.Spec.Template.Spec.Containers[0]
	assert.Equal(t, []string{"serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000", "--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}`, "--kv-cache-dtype", "bfloat16"}, c.Args)
	assert.Contains(t, d.Spec.Template.Annotations["kvcache.gpustack.ai/client-config"], `"tenant_id":"team-a-chat"`)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat-server"}, &corev1.Service{}))
	// `kvcache render` over the same objects, as read from the cluster, prints exactly what was
	// applied: the store of md-store (the ledger seed holds the Binding) and the roles.
	renderedMatchesApplied(t, get(t, md), get(t, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chat"}}),
		get(t, &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "md-pool"}}), get(t, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "md-store"}}))
	eventuallyBinding(t, "team-a", "chat", "usedBy lists the deployment", func(b *kvv1.KVCachePoolBinding) bool {
		return len(b.Status.UsedBy) == 1 && b.Status.UsedBy[0].Name == "qwen-chat"
	})

	markReady(t, "qwen-chat-server")
	markReady(t, "qwen-chat-canary")
	eventuallyMD(t, "qwen-chat", "rolled out, its Pods not seen", func(md *kvv1.ModelDeployment) bool {
		return condition(md.Status.Conditions, kvv1.ConditionCacheAttached).Reason == "NoObservationAvailable" && md.Status.Phase == kvv1.PhaseReady
	})
	pods := append(rolePods(t, "qwen-chat-server"), rolePods(t, "qwen-chat-canary")...)
	// Ready for the window, and nothing written under the tenant: False, on the deployment and
	// on its Binding, naming the Pods.
	got = eventuallyMD(t, "qwen-chat", "CacheAttached False", func(md *kvv1.ModelDeployment) bool {
		return condition(md.Status.Conditions, kvv1.ConditionCacheAttached).Status == metav1.ConditionFalse
	})
	msg := condition(got.Status.Conditions, kvv1.ConditionCacheAttached).Message
	assert.Contains(t, msg, fmt.Sprintf("while Pods %s, %s, %s have been Ready for %s or longer", pods[2], pods[0], pods[1], cacheInUseWindow))
	assert.Contains(t, msg, "kubectl -n team-a exec "+pods[2]+" -- python3 -c")
	assert.Contains(t, msg, "that the engine's bundled Mooncake client is on the master's line (Mooncake 0.3.13, image gpustack/mirrored-mooncake:0.3.13.post1-cpu)")
	eventuallyBinding(t, "team-a", "chat", "CacheInUse False for the deployment's Pods", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionCacheInUse).Status == metav1.ConditionFalse
	})
	fake.SetCharged("team-a-chat", 64<<20) // an engine wrote 64Mi under the tenant
	// The tenant must be empty again before its Binding can be released at cleanup.
	t.Cleanup(func() { fake.SetCharged("team-a-chat", 0) })
	got = eventuallyMD(t, "qwen-chat", "CacheAttached True", func(md *kvv1.ModelDeployment) bool {
		return condition(md.Status.Conditions, kvv1.ConditionCacheAttached).Status == metav1.ConditionTrue
	})
	assert.Equal(t, "WritesObserved", condition(got.Status.Conditions, kvv1.ConditionCacheAttached).Reason)
	assert.Equal(t, "the master of KVCacheBackend md-store saw writes under tenant team-a-chat while Pods using it run", condition(got.Status.Conditions, kvv1.ConditionCacheAttached).Message)

	// Steady: the roles read back as applied, and a reconcile that knows nothing new of the
	// tenant (a restarted manager) keeps the verdict: it writes nothing.
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	counting := &countingClient{Client: env.Client}
	podCache := renderedPodCache(t)
	_, err = (&modeldeployment.Reconciler{Client: counting, Renderer: r, Pods: podCache, Activity: &operator.TenantActivity{}, CacheInUseWindow: cacheInUseWindow}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(md)})
	require.NoError(t, err)
	assert.Empty(t, counting.Writes(), "a steady ModelDeployment's reconcile writes nothing")

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := get(t, &kvv1.ModelDeployment{ObjectMeta: md.ObjectMeta})
		cur.Spec.Roles = cur.Spec.Roles[:1]
		return env.Client.Update(ctx, cur)
	}))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat-canary"}, &appsv1.Deployment{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat-canary"}, &corev1.Service{}))
	}, wait, 100*time.Millisecond, "the removed role is pruned")

	require.NoError(t, env.Client.Delete(ctx, md))
	eventuallyBinding(t, "team-a", "chat", "released", func(b *kvv1.KVCachePoolBinding) bool { return len(b.Status.UsedBy) == 0 })
}

// A Binding that cannot attach (its pool's ledger is unreachable) is reported, naming it, and
// nothing is rendered without the cache.
func TestModelDeploymentReportsAnUnusableBinding(t *testing.T) {
	ctx := context.Background()
	fake := fakeStore(t, "md-down", storetest.FakeOptions{MultiTenancy: true})
	create(t, walkthroughBackend("md-down"))
	create(t, pool("md-down-pool", "md-down", "16Gi"))
	create(t, binding("team-b", "down", "md-down-pool", "team-b-down", "8Gi"))
	fake.SetDown(true)
	// The ledger must answer again before the Binding can be released at cleanup.
	t.Cleanup(func() { fake.SetDown(false) })
	eventuallyPool(t, "md-down-pool", "LedgerUnreachable", func(p *kvv1.KVCachePool) bool {
		return condition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Reason == "LedgerUnreachable"
	})
	md := &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "qwen-down"}, Spec: kvv1.ModelDeploymentSpec{
		Model: kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"}, Engine: kvv1.Engine{Name: kvv1.EngineSGLang, Version: "0.5.18"},
		KVCache: &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "down"}},
		Roles:   []kvv1.Role{{Name: "server"}},
	}}
	require.NoError(t, env.Client.Create(ctx, md))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, md) })
	got := &kvv1.ModelDeployment{}
	require.Eventually(t, func() bool {
		if env.Client.Get(ctx, client.ObjectKeyFromObject(md), got) != nil {
			return false
		}
		return condition(got.Status.Conditions, kvv1.ConditionCacheAttached).Reason == "QuotaLedgerNotAvailable"
	}, wait, 100*time.Millisecond)
	assert.Contains(t, condition(got.Status.Conditions, kvv1.ConditionCacheAttached).Message, `KVCachePool "md-down-pool" reports QuotaLedgerAvailable=False (LedgerUnreachable`)
	assert.Equal(t, kvv1.PhaseDegraded, got.Status.Phase)
	assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "qwen-down-server"}, &appsv1.Deployment{})))
}

// renderedPodCache is a cache of the Pods rendered for ModelDeployments, as the manager keeps
// one, started for the test.
func renderedPodCache(t *testing.T) cache.Cache {
	t.Helper()
	req, err := labels.NewRequirement(vocab.LabelModelDeployment, selection.Exists, nil)
	require.NoError(t, err)
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Client.Scheme(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)}}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	return c
}

// renderedMatchesApplied runs the real `kvcache render -f` over objs and the Setting catalog,
// written as a user would save them with kubectl get -o yaml, and requires every printed object
// to be what the operator applied (testenv.RenderMatchesApplied, through the real kubectl). It
// returns the objects compared (kind/namespace/name).
func renderedMatchesApplied(t *testing.T, objs ...client.Object) []string {
	t.Helper()
	dir := t.TempDir()
	bin, err := testenv.BuildKvcache(t.Context(), dir)
	require.NoError(t, err)
	settings := &kvv1.SettingList{}
	require.NoError(t, env.Client.List(t.Context(), settings))
	for i := range settings.Items {
		objs = append(objs, &settings.Items[i])
	}
	var docs []string
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, env.Client.Scheme())
		require.NoError(t, err)
		o.GetObjectKind().SetGroupVersionKind(gvk)
		o.SetManagedFields(nil)
		b, err := sigsyaml.Marshal(o)
		require.NoError(t, err)
		docs = append(docs, string(b))
	}
	file := filepath.Join(dir, "objects.yaml")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o600))
	cmd := exec.Command(bin, "render", "-f", file, "--system-namespace", systemNamespace)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kvcache render: %s", stderr.String())
	kubeconfig := writeKubeconfig(t)
	kubectl := filepath.Join(env.Environment().BinaryAssetsDirectory, "kubectl")
	run := func(stdin []byte, args ...string) ([]byte, error) {
		c := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		c.Stdin = strings.NewReader(string(stdin))
		var e strings.Builder
		c.Stderr = &e
		o, err := c.Output()
		if err != nil {
			return nil, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, e.String())
		}
		return o, nil
	}
	compared, diffs, err := testenv.RenderMatchesApplied(run, operator.FieldManager, out)
	require.NoError(t, err)
	t.Logf("kvcache render equals what the operator applied, field by field, for %d objects: %s", len(compared), strings.Join(compared, ", "))
	assert.Empty(t, diffs, "what kvcache render prints and what the operator applied differ")
	assert.Greater(t, len(compared), 4, "the store and the roles were compared")
	return compared
}

// Two ModelDeployments can derive one name (qa-b with role c, qa with role b-c), and a name may
// be someone's own Deployment: the second is not applied over the first's, nor over an object
// that is not the operator's, and says whose the name is; once the name is free it renders.
func TestAModelDeploymentNeverTakesANameItDoesNotOwn(t *testing.T) {
	ctx := context.Background()
	md := func(name, role string) *kvv1.ModelDeployment {
		return &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}, Spec: kvv1.ModelDeploymentSpec{
			Model: kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"}, Engine: kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
			Roles: []kvv1.Role{{Name: role}},
		}}
	}
	first, second := md("qa-b", "c"), md("qa", "b-c")
	require.NoError(t, env.Client.Create(ctx, first))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, first) })
	d := &appsv1.Deployment{}
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qa-b-c"}, d) == nil
	}, wait, 100*time.Millisecond)
	require.NoError(t, env.Client.Create(ctx, second))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, second) })
	got := eventuallyMD(t, "qa", "NameTaken", func(m *kvv1.ModelDeployment) bool {
		return condition(m.Status.Conditions, kvv1.ConditionRolloutComplete).Reason == kvv1.ReasonNameTaken
	})
	assert.Regexp(t, `^(Deployment|Service) qa-b-c, which role b-c renders, already exists and belongs to ModelDeployment qa-b: nothing of this ModelDeployment is applied until the name is free; rename this ModelDeployment or the role \(each role's Deployment and Service are named <name>-<role>\)$`,
		condition(got.Status.Conditions, kvv1.ConditionRolloutComplete).Message)
	assert.Equal(t, kvv1.PhaseDegraded, got.Status.Phase)
	time.Sleep(time.Second) // reconciles of both
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qa-b-c"}, d))
	owner := metav1.GetControllerOf(d)
	require.NotNil(t, owner)
	assert.Equal(t, "qa-b", owner.Name, "the first keeps its Deployment")
	assert.Len(t, d.OwnerReferences, 1)

	// Someone's own Deployment, which the operator's cache does not hold.
	own := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mine-server"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "mine"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "mine"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}},
	}}
	require.NoError(t, env.Client.Create(ctx, own))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, own) })
	mine := md("mine", "server")
	require.NoError(t, env.Client.Create(ctx, mine))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, mine) })
	got = eventuallyMD(t, "mine", "NameTaken", func(m *kvv1.ModelDeployment) bool {
		return condition(m.Status.Conditions, kvv1.ConditionRolloutComplete).Reason == kvv1.ReasonNameTaken
	})
	assert.Contains(t, condition(got.Status.Conditions, kvv1.ConditionRolloutComplete).Message, "Deployment mine-server, which role server renders, already exists and belongs to no ModelDeployment (it is not the operator's)",
		"the cache does not hold someone's own Deployment: it is read live")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(own), own))
	assert.Empty(t, own.OwnerReferences, "someone's own Deployment is left alone")
	assert.Equal(t, "busybox", own.Spec.Template.Spec.Containers[0].Image)

	require.NoError(t, env.Client.Delete(ctx, first))
	// envtest runs no garbage collector: the first's children go by hand.
	require.NoError(t, env.Client.Delete(ctx, d))
	require.NoError(t, env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "qa-b-c"}}))
	eventuallyMD(t, "qa", "rendered once the name is free", func(m *kvv1.ModelDeployment) bool {
		return condition(m.Status.Conditions, kvv1.ConditionRolloutComplete).Reason != kvv1.ReasonNameTaken
	})
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qa-b-c"}, d) == nil && metav1.GetControllerOf(d) != nil && metav1.GetControllerOf(d).Name == "qa"
	}, wait, 100*time.Millisecond)
}
