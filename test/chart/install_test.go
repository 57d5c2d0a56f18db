package chart_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/vocab"
)

const serviceAccount = "system:serviceaccount:" + namespace + ":" + release + "-kvcache-operator"

// auditPolicy records every request the manager's service account makes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["` + serviceAccount + `"]
  - level: None
`

func freePort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

func kubeconfigFor(t *testing.T, env *testenv.Env, user envtest.User) string {
	t.Helper()
	u, err := env.Environment().ControlPlane.AddUser(user, nil)
	require.NoError(t, err)
	kc, err := u.KubeConfig()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(p, kc, 0o600))
	return p
}

// TestChartInstallsAndItsManagerServesTheWebhooks installs the chart's manifests into a real API
// server (helm template | kubectl apply --server-side), waits for the CRDs, then runs the
// kvcache binary out of cluster exactly as the chart's Deployment configures it, with the chart's
// service account (so its RBAC is what authorizes every request) and self-managed TLS. The
// webhook configurations the chart installed are pointed at the local server (a URL override,
// for this test only); the manager injects their CA, serves its certificate from the Secret
// with nothing projecting it into its cert dir (no kubelet here), creates the Setting catalog
// with the chart's values, and injects a labelled Pod. An upgrade that changes a Setting's value
// restarts the manager with the new arguments: the catalog follows, the certificate stays. The
// API server's audit log then shows every request the manager made: none was refused, and every
// rule the chart grants was used.
func TestChartInstallsAndItsManagerServesTheWebhooks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog := filepath.Join(dir, "audit.log")
	require.NoError(t, os.WriteFile(policy, []byte(auditPolicy), 0o600))
	env, err := testenv.Start(func(e *envtest.Environment) {
		e.CRDDirectoryPaths, e.ErrorIfCRDPathMissing = nil, false
		e.ControlPlane.GetAPIServer().Configure().
			Append("audit-policy-file", policy).
			Append("audit-log-path", auditLog).
			Append("audit-log-format", "json")
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	admin := kubeconfigFor(t, env, envtest.User{Name: "chart-admin", Groups: []string{"system:masters"}})
	kubectl := filepath.Join(env.Environment().BinaryAssetsDirectory, "kubectl")
	for _, ns := range []string{namespace, "gpustack-system", "team-a"} {
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}

	// helm template | kubectl apply --server-side. The chart's webhook configurations name a
	// Service, which has no endpoints here, so the test points them at the local server's URL
	// in the manifests themselves. Hooks (the pre-delete uninstall check) are helm's to run.
	port := freePort(t)
	var main []string
	for _, doc := range strings.Split(template(t), "\n---\n") {
		switch {
		case strings.Contains(doc, "helm.sh/hook:"):
			require.Contains(t, doc, "helm.sh/hook: pre-delete", "the chart's only hook is the uninstall check")
		case strings.Contains(doc, "kind: MutatingWebhookConfiguration"), strings.Contains(doc, "kind: ValidatingWebhookConfiguration"):
			main = append(main, toURLs(t, doc, port))
		default:
			main = append(main, doc)
		}
	}
	manifests := filepath.Join(dir, "chart.yaml")
	require.NoError(t, os.WriteFile(manifests, []byte(strings.Join(main, "\n---\n")), 0o600))
	run(t, kubectl, "--kubeconfig", admin, "apply", "--server-side", "-f", manifests)
	run(t, kubectl, "--kubeconfig", admin, "wait", "--for", "condition=established", "crd", "--all", "--timeout=60s")

	// The manager, as the chart's Deployment runs it, with the chart's service account.
	d := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-kvcache-operator"}, d))
	container := d.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"kvcache"}, container.Command)
	bin, err := testenv.BuildKvcache(t.Context(), dir)
	require.NoError(t, err)
	sa := kubeconfigFor(t, env, envtest.User{Name: serviceAccount, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}})
	mgr := startManager(t, bin, dir, sa, port, container.Args)

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: release + "-kvcache-operator"}, mwc))
	assert.NotEmpty(t, mwc.Webhooks[0].ClientConfig.CABundle, "the manager injected its CA")
	secret := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-kvcache-operator-webhook-tls"}, secret))
	assert.Contains(t, secret.Data, "tls.crt")
	copied, err := os.ReadFile(filepath.Join(dir, "certs", "tls.crt"))
	require.NoError(t, err, "the manager keeps a copy of its certificate in --cert-dir")
	assert.Equal(t, secret.Data["tls.crt"], copied)

	// The Setting catalog: created by the manager with the chart's values, recreated when
	// deleted; an edit stands.
	catalog := map[string]string{kvv1.SettingKVCacheBackendImage: "gpustack/mirrored-mooncake:0.3.13.post1-cpu", kvv1.SettingKVCacheDtypeOwned: "true"}
	for name, want := range catalog {
		waitSetting(t, env, name, want)
	}
	require.NoError(t, env.Client.Delete(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: kvv1.SettingKVCacheDtypeOwned}}))
	waitSetting(t, env, kvv1.SettingKVCacheDtypeOwned, "true")
	setSetting(t, env, kvv1.SettingKVCacheDtypeOwned, "false")
	time.Sleep(2 * time.Second) // the manager had every chance to undo the edit
	waitSetting(t, env, kvv1.SettingKVCacheDtypeOwned, "false")
	setSetting(t, env, kvv1.SettingKVCacheDtypeOwned, "true")

	exercise(t, env)

	// The pre-delete hook, as the chart's Job runs it (its args, the chart's service account):
	// it refuses while the objects exercise made exist, naming each and the way back.
	var hookArgs []string
	for _, doc := range strings.Split(template(t), "\n---\n") {
		if strings.Contains(doc, "helm.sh/hook: pre-delete") {
			job := &batchv1.Job{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), job))
			c := job.Spec.Template.Spec.Containers[0]
			require.Equal(t, []string{"kvcache"}, c.Command)
			hookArgs = c.Args
		}
	}
	require.NotEmpty(t, hookArgs, "the chart's pre-delete Job")
	out, err := exec.Command(bin, append(append([]string{}, hookArgs...), "--kubeconfig="+sa, "--wait=1s")...).CombinedOutput()
	require.Error(t, err, "the uninstall check refuses while objects exist:\n%s", out)
	for _, want := range []string{"uninstall refused", "ModelDeployment team-a/qwen-chat", "KVCachePoolBinding team-a/legacy", "KVCachePool legacy",
		"KVCacheBackend legacy", "KVCacheBackend tenants", "helm rollback " + release + " 1 -n " + namespace} {
		assert.Contains(t, string(out), want)
	}

	// An upgrade re-applies the chart's manifests (the Secret without data, the webhook
	// configurations without a caBundle) and, with a changed value, restarts the manager with
	// new arguments: what the manager wrote stays, the catalog takes the new value, and
	// admission keeps working.
	caBefore := mwc.Webhooks[0].ClientConfig.CABundle
	upgraded := template(t, "--set", "settings.kvCacheBackendImage=gpustack/mirrored-mooncake:0.3.13.post1-cpu-rebuilt")
	var again []string
	for _, doc := range strings.Split(upgraded, "\n---\n") {
		switch {
		case strings.Contains(doc, "helm.sh/hook:"):
		case strings.Contains(doc, "kind: MutatingWebhookConfiguration"), strings.Contains(doc, "kind: ValidatingWebhookConfiguration"):
			again = append(again, toURLs(t, doc, port))
		default:
			again = append(again, doc)
		}
	}
	require.NoError(t, os.WriteFile(manifests, []byte(strings.Join(again, "\n---\n")), 0o600))
	run(t, kubectl, "--kubeconfig", admin, "apply", "--server-side", "-f", manifests)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-kvcache-operator"}, d))
	mgr.stop()
	mgr = startManager(t, bin, dir, sa, port, d.Spec.Template.Spec.Containers[0].Args)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: release + "-kvcache-operator"}, mwc))
	assert.Equal(t, caBefore, mwc.Webhooks[0].ClientConfig.CABundle, "the upgrade keeps the injected CA")
	after := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(secret), after))
	assert.Equal(t, secret.Data["tls.crt"], after.Data["tls.crt"], "the upgrade keeps the certificate the manager wrote")
	waitSetting(t, env, kvv1.SettingKVCacheBackendImage, "gpustack/mirrored-mooncake:0.3.13.post1-cpu-rebuilt")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "after-upgrade", Labels: map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{vocab.AnnotationBinding: "legacy", vocab.AnnotationEngine: "vLLM"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "vllm/vllm-openai:v0.29.0", Command: []string{"vllm"}, Args: []string{"serve", "--model", "m"}}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod), "admission works after the upgrade")
	assert.Contains(t, pod.Annotations, vocab.AnnotationInjected)
	mgr.stop()
	assertRBACMatchesRequests(t, auditLog)
}

// runningManager is the kvcache manager process of one test.
type runningManager struct {
	cmd     *exec.Cmd
	stopped bool
}

func (m *runningManager) stop() {
	if !m.stopped {
		m.stopped = true
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		_ = m.cmd.Wait()
	}
}

// startManager runs bin with the chart's container args, out of cluster as the chart's service
// account, and waits until it reports ready.
func startManager(t *testing.T, bin, dir, kubeconfig string, webhookPort int, chartArgs []string) *runningManager {
	t.Helper()
	probe := freePort(t)
	args := append(append([]string{}, chartArgs...),
		"--kubeconfig="+kubeconfig, "--webhook-port="+strconv.Itoa(webhookPort), "--cert-dir="+filepath.Join(dir, "certs"),
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probe), "--cert-dns-names=localhost")
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+namespace)
	logs, err := os.OpenFile(filepath.Join(dir, "manager.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	m := &runningManager{cmd: cmd}
	t.Cleanup(m.stop)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("manager log (tail):\n%s", b)
		}
	})
	t0 := time.Now()
	require.Eventually(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe)) //nolint:noctx // a readiness poll
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "the manager becomes ready once it serves with its own certificate")
	t.Logf("manager ready %s after start", time.Since(t0).Round(10*time.Millisecond))
	return m
}

func waitSetting(t *testing.T, env *testenv.Env, name, want string) {
	t.Helper()
	var got kvv1.Setting
	require.Eventually(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKey{Name: name}, &got) == nil && got.Spec.Value == want
	}, 30*time.Second, 100*time.Millisecond, "Setting %s has value %q (has %q)", name, want, got.Spec.Value)
}

func setSetting(t *testing.T, env *testenv.Env, name, value string) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &kvv1.Setting{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
			return err
		}
		s.Spec.Value = value
		return env.Client.Update(context.Background(), s)
	}))
}

// toURLs rewrites one rendered webhook configuration so that every webhook calls the local
// server on port at the path the chart gives its Service reference.
func toURLs(t *testing.T, doc string, port int) string {
	t.Helper()
	obj := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
	hooks, _ := obj["webhooks"].([]any)
	require.NotEmpty(t, hooks, "a webhook configuration without webhooks:\n%s", doc)
	for _, h := range hooks {
		cc := h.(map[string]any)["clientConfig"].(map[string]any)
		svc := cc["service"].(map[string]any)
		cc["url"] = fmt.Sprintf("https://localhost:%d%s", port, svc["path"])
		delete(cc, "service")
	}
	out, err := yaml.Marshal(obj)
	require.NoError(t, err)
	return string(out)
}

// exercise drives what the manager does in a cluster: store children for an electing,
// multi-tenant backend and a legacy one, pools and Bindings with finalizers, a stale member Pod
// restarted, and a labelled Pod injected through the webhook.
func exercise(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	member := func() []kvv1.MemberGroup {
		return []kvv1.MemberGroup{{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, CapacityPerMember: resource.MustParse("1Gi")}}
	}
	legacy := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: kvv1.KVCacheBackendSpec{
		Image: "kvcacheai/mooncake:0.3.11",
		Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Leader: kvv1.Leader{MultiTenancy: ptr.To(false), ElectionBackend: kvv1.ElectionNone}, Members: member()}}}}
	tenants := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "tenants"}, Spec: kvv1.KVCacheBackendSpec{
		Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{Members: append(member(), kvv1.MemberGroup{
			NodeSelector: map[string]string{"pool": "b"}, CapacityPerMember: resource.MustParse("1Gi")})}}}}
	for _, o := range []client.Object{
		legacy, tenants,
		&kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}, Spec: kvv1.KVCachePoolSpec{Backends: []string{"legacy"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("1Gi")}}},
		&kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "legacy"}, Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: "legacy"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
			Domain: kvv1.Domain{BlockSize: 64, Dtype: "bfloat16"}}},
	} {
		require.NoError(t, env.Client.Create(ctx, o), "%T %s", o, o.GetName())
	}
	// A member Pod whose pod spec is stale (the DaemonSet controller would have created it from
	// an older template): the operator deletes it.
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "tenants-member-0"}, &appsv1.DaemonSet{}) == nil
	}, 30*time.Second, 100*time.Millisecond)
	stale := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpustack-system", Name: "tenants-member-0-old", Labels: map[string]string{
		vocab.LabelName: vocab.StoreName, vocab.LabelInstance: "tenants", vocab.LabelComponent: "member-0",
		vocab.LabelManagedBy: vocab.ManagedBy, vocab.LabelPodSpecHash: "stale"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "member", Image: "x"}}}}
	require.NoError(t, env.Client.Create(ctx, stale))
	require.Eventually(t, func() bool {
		p := &corev1.Pod{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(stale), p) != nil || p.DeletionTimestamp != nil
	}, 30*time.Second, 100*time.Millisecond, "the stale member Pod is deleted")

	require.Eventually(t, func() bool {
		evs := &eventsv1.EventList{}
		if env.Client.List(ctx, evs) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "MemberRestarted" {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the restart is reported as an event")

	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "tenants-store"}, &networkingv1.NetworkPolicy{}),
		"the store's NetworkPolicy is applied with the rest")
	// The render drops the second group, the election accounts, the ledger seed and the
	// NetworkPolicy: pruned.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := &kvv1.KVCacheBackend{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "tenants"}, b); err != nil {
			return err
		}
		b.Spec.Connection.Managed.Members = b.Spec.Connection.Managed.Members[:1]
		b.Spec.Connection.Managed.Leader.ElectionBackend = kvv1.ElectionNone
		b.Spec.Connection.Managed.Leader.MultiTenancy = ptr.To(false)
		b.Spec.Connection.Managed.NetworkPolicy.Enabled = ptr.To(false)
		return env.Client.Update(ctx, b)
	}))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "tenants-member-1"}, &appsv1.DaemonSet{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "tenants-leader"}, &rbacv1.RoleBinding{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "tenants-tenant-quota-policy"}, &corev1.ConfigMap{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "tenants-store"}, &networkingv1.NetworkPolicy{}))
	}, 30*time.Second, 100*time.Millisecond, "what the render dropped is pruned")

	require.Eventually(t, func() bool {
		p := &kvv1.KVCachePool{}
		if env.Client.Get(ctx, client.ObjectKey{Name: "legacy"}, p) != nil {
			return false
		}
		c := meta.FindStatusCondition(p.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable)
		return p.Status.ClientEndpoint != "" && c != nil && c.Reason == kvv1.ReasonMultiTenancyDisabled
	}, 30*time.Second, 100*time.Millisecond, "the pool publishes its endpoint and MultiTenancyDisabled")

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "bench", Labels: map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{vocab.AnnotationBinding: "legacy", vocab.AnnotationEngine: "vLLM"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "vllm/vllm-openai:v0.29.0", Command: []string{"vllm"}, Args: []string{"serve", "--model", "m"}}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	// A ModelDeployment on an InstanceType: its validator reads both.
	require.NoError(t, env.Client.Create(ctx, &kvv1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec: kvv1.InstanceTypeSpec{Accelerator: &kvv1.Accelerator{ResourceName: "nvidia.com/gpu", Manufacturer: "nvidia"}}}))
	require.NoError(t, env.Client.Create(ctx, &kvv1.ModelDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "qwen-chat"},
		Spec: kvv1.ModelDeploymentSpec{Model: kvv1.Model{Name: "Qwen/Qwen2.5-7B-Instruct"}, Engine: kvv1.Engine{Name: kvv1.EngineVLLM, Version: "0.29.0"},
			KVCache: &kvv1.KVCacheAttachment{PoolRef: kvv1.LocalReference{Name: "legacy"}},
			Roles:   []kvv1.Role{{Name: "server", InstanceType: "a100"}, {Name: "canary", InstanceType: "a100"}}}}))
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat-canary"}, &appsv1.Deployment{}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the roles render")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		md := &kvv1.ModelDeployment{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat"}, md); err != nil {
			return err
		}
		md.Spec.Roles = md.Spec.Roles[:1]
		return env.Client.Update(ctx, md)
	}))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "qwen-chat-canary"}, &corev1.Service{}))
	}, 30*time.Second, 100*time.Millisecond, "the removed role is pruned")
	assert.JSONEq(t, `{"binding":"legacy","engine":"vllm","vehicle":"file","domain":"default","tenantInjected":true,"launchProgram":"vllm","launchArgsForwarded":false}`,
		pod.Annotations[vocab.AnnotationInjected], "the labelled Pod was injected by the chart-installed webhook")

	// A backend deleted: its leader goes first, then the election Lease its launchers created
	// (which nothing else would remove).
	brief := &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "brief"}, Spec: kvv1.KVCacheBackendSpec{
		Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{Members: member()}}}}
	require.NoError(t, env.Client.Create(ctx, brief))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpustack-system", Name: "brief-leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("brief-leader-0")}}
	require.NoError(t, env.Client.Create(ctx, lease), "as a launcher creates it")
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: "brief-leader"}, &appsv1.Deployment{}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the leader renders")
	require.NoError(t, env.Client.Delete(ctx, brief))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(brief), &kvv1.KVCacheBackend{})) &&
			apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(lease), &coordinationv1.Lease{}))
	}, 30*time.Second, 100*time.Millisecond, "the backend and its election Lease are gone")
}

// cacheMiss is why the webhooks may read an object of this API live: when the cache has not seen
// it yet (created a moment before the object that names it) or it does not exist. The audit log
// shows such a read only when that race happens during the run.
const cacheMiss = "read live when the cache has not seen the object (injection.CachedThenLive)"

// unusedButNeeded are grants no request shows, and why they are still needed. Beside these,
// "list" is granted wherever "watch" is used: informers stream their initial list over a watch
// where the API server supports it (WatchList) and fall back to LIST where it does not.
var unusedButNeeded = map[string]string{
	"worker.gpustack.ai/kvcachepoolbindings get":            cacheMiss,
	"worker.gpustack.ai/kvcachebackends get":                cacheMiss,
	"worker.gpustack.ai/kvcachepools get":                   cacheMiss,
	"worker.gpustack.ai/instancetypes get":                  cacheMiss,
	"/pods patch":                                           "the store's leader Role grants pods patch; RBAC lets the operator grant only what it holds",
	"/pods get":                                             "the store's leader Role grants pods get (a launcher checks its peers' addresses); RBAC lets the operator grant only what it holds",
	"/events patch":                                         "leader election's recorder patches an event it repeats instead of creating another",
	"events.k8s.io/events patch":                            "the event recorder patches a repeated event's series instead of creating another",
	"worker.gpustack.ai/modeldeployments/finalizers update": "OwnerReferencesPermissionEnforcement (enabled on some clusters) checks it when children carry blockOwnerDeletion",
	"worker.gpustack.ai/kvcachebackends/finalizers update":  "OwnerReferencesPermissionEnforcement (enabled on some clusters) checks it when children carry blockOwnerDeletion",
	"apps/deployments get":                                  deferred,
	"apps/daemonsets get":                                   deferred,
	"apps/replicasets get":                                  handover,
	"apps/replicasets patch":                                handover,
}

// Requests made only in a store's rollouts, which this install does not go through (test/cluster
// does, with the chart's own RBAC: the operator's upgrade and a leader change at 3 replicas).
const (
	deferred = "a store workload is read live (with its managed fields) only when an operator update to its Pods is deferred"
	handover = "a leader rollout with standbys ends in one handover: the serving leader's ReplicaSet is scaled to zero"
)

func assertRBACMatchesRequests(t *testing.T, auditLog string) {
	t.Helper()
	f, err := os.Open(auditLog)
	require.NoError(t, err)
	defer f.Close()
	used := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r auditv1.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		if os.Getenv("KVCACHE_AUDIT_DEBUG") != "" && strings.Contains(sc.Text(), "webhookconfigurations") {
			t.Logf("audit: %s", sc.Text())
		}
		if r.User.Username != serviceAccount || r.Stage != auditv1.StageResponseComplete || r.ObjectRef == nil || r.ObjectRef.Resource == "" {
			continue
		}
		res := r.ObjectRef.Resource
		if r.ObjectRef.Subresource != "" {
			res += "/" + r.ObjectRef.Subresource
		}
		key := r.ObjectRef.APIGroup + "/" + res + " " + r.Verb
		require.NotNil(t, r.ResponseStatus, "a completed request has a status")
		assert.NotEqual(t, int32(http.StatusForbidden), r.ResponseStatus.Code, "the chart's RBAC refused %s %s/%s", key, r.ObjectRef.Namespace, r.ObjectRef.Name)
		used[key] = true
	}
	require.NotEmpty(t, used, "the audit log holds the manager's requests")

	granted := map[string]bool{}
	rendered := template(t)
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var rules []rbacv1.PolicyRule
		switch {
		case strings.Contains(doc, "\nkind: ClusterRole\n"):
			var cr rbacv1.ClusterRole
			require.NoError(t, yaml.Unmarshal([]byte(doc), &cr))
			rules = cr.Rules
		case strings.Contains(doc, "\nkind: Role\n"):
			var r rbacv1.Role
			require.NoError(t, yaml.Unmarshal([]byte(doc), &r))
			rules = r.Rules
		default:
			continue
		}
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						assert.NotEqual(t, "*", v, "no wildcard verbs")
						assert.NotEqual(t, "*", res, "no wildcard resources")
						granted[g+"/"+res+" "+v] = true
					}
				}
			}
		}
	}
	var unused []string
	for g := range granted {
		if res, ok := strings.CutSuffix(g, " list"); ok && used[res+" watch"] {
			continue
		}
		// Server-side apply is a PATCH in the audit log; one that creates the object is
		// authorized as create.
		if res, ok := strings.CutSuffix(g, " create"); ok && used[res+" patch"] {
			continue
		}
		if !used[g] && unusedButNeeded[g] == "" {
			unused = append(unused, g)
		}
	}
	sort.Strings(unused)
	assert.Empty(t, unused, "the chart grants what the manager never asked for: remove it, or say why it is needed in unusedButNeeded")
	var requested []string
	for u := range used {
		requested = append(requested, u)
	}
	sort.Strings(requested)
	t.Logf("requests the manager made (group/resource verb):\n%s", strings.Join(requested, "\n"))
}
