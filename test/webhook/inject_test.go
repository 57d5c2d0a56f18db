package webhook_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// loadObjects decodes a YAML file of Kubernetes objects.
func loadObjects(t testing.TB, path string) []generator.Object {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	objs, err := r.Decode(path, data)
	require.NoError(t, err)
	return objs
}

// applyCluster creates the objects the webhook resolves, as the operator would have left them,
// and deletes them when the test ends. Pools carry the status the operator publishes (the
// file's, or the derived one); a Binding with a deletionTimestamp is created with its finalizer
// and then deleted; an object whose referent does not exist (a pool over a missing backend, a
// Binding of a missing pool) is created next to a placeholder referent that is deleted again,
// since the validating webhooks refuse dangling references at creation.
func applyCluster(t testing.TB, path string) {
	t.Helper()
	ctx := context.Background()
	objs := loadObjects(t, path)
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	backends := map[string]*kvv1.KVCacheBackend{}
	pools := map[string]bool{}
	for _, o := range objs {
		switch x := o.(type) {
		case *kvv1.KVCacheBackend:
			backends[x.Name] = x
		case *kvv1.KVCachePool:
			pools[x.Name] = true
		}
	}
	remove := func(o client.Object) {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		if len(o.GetFinalizers()) > 0 {
			o.SetFinalizers(nil)
			_ = env.Client.Update(ctx, o)
		}
		_ = env.Client.Delete(ctx, o)
		cachedGone(t, o)
	}
	createNow := func(o client.Object) {
		t.Helper()
		require.NoError(t, env.Client.Create(ctx, o), "create %T %s", o, o.GetName())
		t.Cleanup(func() { remove(o) })
	}
	placeholder := func(o client.Object) func() {
		createNow(o)
		return func() {
			require.NoError(t, env.Client.Delete(ctx, o))
			cachedGone(t, o)
		}
	}
	for _, o := range objs {
		o := o.DeepCopyObject().(client.Object)
		deleting := o.GetDeletionTimestamp() != nil
		o.SetDeletionTimestamp(nil)
		var status *kvv1.KVCachePoolStatus
		var dropPlaceholder func()
		switch x := o.(type) {
		case *kvv1.Setting:
			// The catalog exists (the chart installs it): set the value, restore it afterwards.
			live := &kvv1.Setting{}
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(x), live))
			was := live.Spec.Value
			live.Spec.Value = x.Spec.Value
			require.NoError(t, env.Client.Update(ctx, live))
			cached(t, live)
			t.Cleanup(func() {
				_ = env.Client.Get(ctx, client.ObjectKeyFromObject(x), live)
				live.Spec.Value = was
				if env.Client.Update(ctx, live) == nil {
					cached(t, live)
				}
			})
			continue
		case *kvv1.KVCachePool:
			s := x.Status.DeepCopy()
			b, known := backends[x.Spec.Backends[0]]
			if len(s.Conditions) == 0 && s.ClientEndpoint == "" && known {
				d := x.DeepCopy()
				objects.DerivePoolStatus(d, b, generator.DefaultSystemNamespace, r.Defaults())
				s = &d.Status
			}
			status = s
			if !known {
				dropPlaceholder = placeholder(&kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: x.Spec.Backends[0]},
					Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{External: &kvv1.ExternalConnection{Endpoints: []kvv1.Endpoint{
						{Name: kvv1.EndpointClient, Address: "placeholder:50051"}, {Name: kvv1.EndpointAdmin, Address: "placeholder:9003"}}}}}})
			}
		case *kvv1.KVCachePoolBinding:
			if !pools[x.Spec.PoolRef.Name] {
				dropPlaceholder = placeholder(&kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: x.Spec.PoolRef.Name},
					Spec: kvv1.KVCachePoolSpec{Backends: []string{"mooncake-dram"}, Quota: kvv1.PoolQuota{Total: x.Spec.Quota.Ceiling}}})
			}
		}
		createNow(o)
		if status != nil {
			p := o.(*kvv1.KVCachePool)
			p.Status = *status
			require.NoError(t, env.Client.Status().Update(ctx, p))
		}
		if dropPlaceholder != nil {
			dropPlaceholder()
		}
		if deleting {
			require.NoError(t, env.Client.Delete(ctx, o))
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(o), o))
		}
		cached(t, o)
	}
}

// cached waits until the manager's cache holds o at its resourceVersion (the tests are the
// only writers here: the manager runs no controllers).
func cached(t testing.TB, o client.Object) {
	t.Helper()
	got := o.DeepCopyObject().(client.Object)
	require.Eventually(t, func() bool {
		return managerCache.Get(context.Background(), client.ObjectKeyFromObject(o), got) == nil && got.GetResourceVersion() == o.GetResourceVersion()
	}, 10*time.Second, 10*time.Millisecond, "the manager's cache has %T %s at resourceVersion %s", o, client.ObjectKeyFromObject(o), o.GetResourceVersion())
}

// cachedGone waits until the manager's cache no longer holds o.
func cachedGone(t testing.TB, o client.Object) {
	t.Helper()
	got := o.DeepCopyObject().(client.Object)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(managerCache.Get(context.Background(), client.ObjectKeyFromObject(o), got))
	}, 10*time.Second, 10*time.Millisecond, "the manager's cache drops %T %s", o, client.ObjectKeyFromObject(o))
}

// podCase is a bare-Pod golden case of snapshots/inject.
type podCase struct {
	name     string
	pod      *corev1.Pod
	injected *corev1.Pod // nil when refused
	refusal  string
	extra    string // <case>.cluster.yaml, when present
}

func podCases(t *testing.T) []podCase {
	t.Helper()
	dir := golden.Dir("inject")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var cases []podCase
	for _, e := range entries {
		n := e.Name()
		if n == "cluster.yaml" || strings.Contains(strings.TrimSuffix(n, ".yaml"), ".") || !strings.HasSuffix(n, ".yaml") {
			continue
		}
		name := strings.TrimSuffix(n, ".yaml")
		objs := loadObjects(t, filepath.Join(dir, n))
		if len(objs) != 1 {
			continue
		}
		pod, ok := objs[0].(*corev1.Pod)
		if !ok || !injection.OptedIn(pod) {
			continue
		}
		c := podCase{name: name, pod: pod}
		if b, err := os.ReadFile(filepath.Join(dir, name+".refused.txt")); err == nil {
			_, msg, _ := strings.Cut(strings.TrimSpace(string(b)), ": ")
			_, msg, _ = strings.Cut(msg, ": ")
			c.refusal = msg
		} else {
			out := loadObjects(t, filepath.Join(dir, name+".injected.yaml"))
			require.Len(t, out, 1)
			c.injected = out[0].(*corev1.Pod)
		}
		if _, err := os.Stat(filepath.Join(dir, name+".cluster.yaml")); err == nil {
			c.extra = filepath.Join(dir, name+".cluster.yaml")
		}
		cases = append(cases, c)
	}
	require.NotEmpty(t, cases)
	return cases
}

// reference stores pod in the manager's namespace, which the Pod webhooks skip, so the API
// server defaults it exactly as it defaults the Pod under test.
func reference(t *testing.T, pod *corev1.Pod, name string) *corev1.Pod {
	t.Helper()
	ref := pod.DeepCopy()
	ref.Namespace, ref.Name, ref.ResourceVersion = managerNamespace, name, ""
	require.NoError(t, env.Client.Create(context.Background(), ref))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ref, client.GracePeriodSeconds(0)) })
	return ref
}

func create(t testing.TB, pod *corev1.Pod, name string) (*corev1.Pod, error) {
	t.Helper()
	p := pod.DeepCopy()
	p.Namespace, p.Name = userNamespace, name
	err := env.Client.Create(context.Background(), p)
	if err == nil {
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	}
	return p, err
}

func assertSamePod(t *testing.T, want, got *corev1.Pod) {
	t.Helper()
	assert.Equal(t, want.Labels, got.Labels, "labels")
	assert.Equal(t, want.Annotations, got.Annotations, "annotations")
	assert.Equal(t, want.Spec, got.Spec, "spec")
}

// TestGoldensThroughTheAPIServer creates every bare-Pod golden case with the client, as kubectl
// would, and requires the stored Pod to equal the golden (both defaulted by the same server) or
// the API error to carry the golden refusal with nothing stored.
func TestGoldensThroughTheAPIServer(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	for _, c := range podCases(t) {
		t.Run(c.name, func(t *testing.T) {
			if c.extra != "" {
				applyCluster(t, c.extra)
			}
			name := "golden-" + c.name
			var got *corev1.Pod
			var err error
			// The manager reads Settings from its cache: a case that adds one waits until the
			// webhook has seen it.
			require.Eventually(t, func() bool {
				got, err = create(t, c.pod, name)
				if err == nil && c.injected == nil || err != nil && c.injected != nil && c.extra != "" {
					_ = env.Client.Delete(context.Background(), got, client.GracePeriodSeconds(0))
					waitGone(t, got)
					return false
				}
				return true
			}, 10*time.Second, 200*time.Millisecond, "outcome of %s: %v", c.name, err)
			if c.injected == nil {
				require.Error(t, err)
				assert.True(t, apierrors.IsForbidden(err), "a refusal is a 403: %v", err)
				assert.Contains(t, err.Error(), `admission webhook "inject.pods.kvcache.gpustack.ai" denied the request: `+c.refusal)
				stored := &corev1.Pod{}
				assert.True(t, apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKey{Namespace: userNamespace, Name: name}, stored)), "a refused Pod is not stored")
				return
			}
			require.NoError(t, err)
			stored := &corev1.Pod{}
			require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(got), stored))
			assertSamePod(t, reference(t, c.injected, name), stored)
		})
	}
}

func waitGone(t *testing.T, p *corev1.Pod) {
	t.Helper()
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{}))
	}, 10*time.Second, 50*time.Millisecond)
}

func vllmPod(labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
			vocab.AnnotationBinding: "team-a", vocab.AnnotationEngine: "vLLM",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "server", Image: "vllm/vllm-openai:v0.29.0",
			Command: []string{"vllm"}, Args: []string{"serve", "--model", "Qwen/Qwen3-8B"},
		}}},
	}
}

// Pods that did not opt in reach the store exactly as submitted: no patch, nothing added.
func TestPodsNotOptedInAreStoredAsSubmitted(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	for name, labels := range map[string]map[string]string{
		"unlabelled":  nil,
		"label-false": {vocab.LabelInject: "false"},
		"other-label": {"app": "chat"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := vllmPod(labels)
			pod.Spec.Containers[0].Command = nil // would be refused if it were looked at
			got, err := create(t, pod, "plain-"+name)
			require.NoError(t, err)
			stored := &corev1.Pod{}
			require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(got), stored))
			assertSamePod(t, reference(t, pod, "plain-"+name), stored)
		})
	}
}

// Without controllers in envtest a Deployment creates no Pods: the Pod its ReplicaSet would
// create (the template, with an ownerReference) is injected like a bare Pod.
func TestReplicaSetPodIsInjectedLikeABarePod(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	objs := loadObjects(t, filepath.Join(golden.Dir("inject"), "walkthrough-deployment.yaml"))
	d := objs[0].(*appsv1.Deployment)
	d.Namespace = userNamespace
	require.NoError(t, env.Client.Create(ctx, d))
	defer func() { _ = env.Client.Delete(ctx, d) }()
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: "chat-5d8f7c9b6",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: d.Spec.Replicas, Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
	require.NoError(t, env.Client.Create(ctx, rs))
	defer func() { _ = env.Client.Delete(ctx, rs) }()
	pod := &corev1.Pod{ObjectMeta: *rs.Spec.Template.ObjectMeta.DeepCopy(), Spec: *rs.Spec.Template.Spec.DeepCopy()}
	pod.GenerateName = "chat-5d8f7c9b6-"
	pod.Namespace = userNamespace
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	require.NoError(t, env.Client.Create(ctx, pod))
	defer func() { _ = env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)) }()

	want := loadObjects(t, filepath.Join(golden.Dir("inject"), "walkthrough-deployment.injected.yaml"))[0].(*appsv1.Deployment)
	ref := reference(t, &corev1.Pod{ObjectMeta: want.Spec.Template.ObjectMeta, Spec: want.Spec.Template.Spec}, "rs-pod-reference")
	stored := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(pod), stored))
	assertSamePod(t, ref, stored)
	assert.Equal(t, "chat-5d8f7c9b6", stored.OwnerReferences[0].Name)
}

// bindingWithLedger creates a Binding of shared-dram in the user namespace carrying the ledger
// finalizer the Binding controller puts on it, so deleting it leaves it deleting (no controller
// runs here to release it); the finalizer is dropped when the test ends.
func bindingWithLedger(t *testing.T, name string) *kvv1.KVCachePoolBinding {
	t.Helper()
	ctx := context.Background()
	b := &kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: userNamespace, Name: name, Finalizers: []string{kvv1.FinalizerBinding}},
		Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: "shared-dram"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
			Domain: kvv1.Domain{Name: "team-a-" + name, BlockSize: 64, Dtype: "bfloat16"},
		},
	}
	require.NoError(t, env.Client.Create(ctx, b))
	t.Cleanup(func() {
		live := &kvv1.KVCachePoolBinding{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(b), live) == nil {
			live.Finalizers = nil
			_ = env.Client.Update(ctx, live)
			_ = env.Client.Delete(ctx, live)
		}
	})
	return b
}

// A Binding created a moment ago admits the Pods that name it: when the manager's cache has not
// seen it yet, the webhook reads it live, once.
func TestBindingCreatedAMomentAgoAdmitsItsPods(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	for i := range 5 {
		name := fmt.Sprintf("fresh-%d", i)
		bindingWithLedger(t, name)
		before := apiRequests(t, "GET", "kvcachepoolbindings")
		pod := vllmPod(map[string]string{vocab.LabelInject: "true"})
		pod.Annotations[vocab.AnnotationBinding] = name
		got, err := create(t, pod, name)
		require.NoError(t, err, "a Pod naming a Binding created just before it")
		stored := &corev1.Pod{}
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(got), stored))
		assert.Contains(t, stored.Annotations[vocab.AnnotationInjected], `"binding":"`+name+`"`)
		assert.LessOrEqual(t, apiRequests(t, "GET", "kvcachepoolbindings")-before, 1.0, "at most the one live read of a cache miss")
	}
}

// A Binding being deleted admits no new Pods once the manager's cache has the deletion, and the
// refusal then costs no API read. (Before the watch delivers it, a Pod may still be admitted:
// the window injection.ClientLookup documents.)
func TestDeletingBindingIsRefusedFromTheCache(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	b := bindingWithLedger(t, "closing")
	pod := vllmPod(map[string]string{vocab.LabelInject: "true"})
	pod.Annotations[vocab.AnnotationBinding] = b.Name
	_, err := create(t, pod, "closing-while-live")
	require.NoError(t, err)
	require.NoError(t, env.Client.Delete(ctx, b))
	const refusal = `admission webhook "inject.pods.kvcache.gpustack.ai" denied the request: KVCachePoolBinding team-a/closing is being deleted, so new Pods may not attach to it; name another Binding`
	attempt := 0
	require.Eventually(t, func() bool {
		attempt++
		_, err := create(t, pod, fmt.Sprintf("closing-%d", attempt))
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), refusal)
	}, 10*time.Second, 20*time.Millisecond, "the webhook never refused the deleting Binding")
	before := apiRequests(t, "GET", "kvcachepoolbindings")
	for i := range 5 {
		_, err := create(t, pod, fmt.Sprintf("closing-refused-%d", i))
		require.Error(t, err)
		assert.Contains(t, err.Error(), refusal)
	}
	assert.Zero(t, apiRequests(t, "GET", "kvcachepoolbindings")-before, "refused from the cache, without a live read")
}
