package webhook_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/check"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/vocab"
)

// liveCheck runs `kvcache check` against the suite's API server, for team-a.
func liveCheck(t *testing.T) *check.Report {
	t.Helper()
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	report, err := check.Live(context.Background(), env.Client, check.LiveOptions{
		SystemNamespace: managerNamespace, Namespace: userNamespace, Injector: injection.New(r),
	})
	require.NoError(t, err)
	return report
}

// findings are a report's findings of one check, by object.
func findings(r *check.Report, name string) map[string]check.Finding {
	out := map[string]check.Finding{}
	for _, f := range r.Findings {
		if f.Check == name {
			out[f.Object] = f
		}
	}
	return out
}

// The webhooks are configured, and a dry-run create of an opted-in Pod reaches the Pod webhook
// through the API server, which answers; with a caBundle that does not verify the server, the
// same probe FAILs with the API server's own error.
func TestCheckSeesTheWebhooksAnswerAndACABundleThatDoesNot(t *testing.T) {
	r := liveCheck(t)
	configured := findings(r, "webhook.configured")
	require.Len(t, configured, 2, "%+v", r.Findings)
	for _, f := range configured {
		assert.Equal(t, check.Pass, f.Level, f.Message)
	}
	answers := findings(r, "webhook.answers")["Namespace/"+userNamespace]
	assert.Equal(t, check.Pass, answers.Level, answers.Message)

	ctx := context.Background()
	name := hooks.MutatingWebhooks[0].Name
	var good []byte
	setCA := func(ca []byte) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, m); err != nil {
				return err
			}
			for i := range m.Webhooks {
				if m.Webhooks[i].Name == check.WebhookInject {
					if good == nil {
						good = m.Webhooks[i].ClientConfig.CABundle
					}
					m.Webhooks[i].ClientConfig.CABundle = ca
				}
			}
			return env.Client.Update(ctx, m)
		}))
	}
	setCA(otherCA(t))
	t.Cleanup(func() { setCA(good) })
	require.Eventually(t, func() bool {
		return findings(liveCheck(t), "webhook.answers")["Namespace/"+userNamespace].Level == check.Fail
	}, 10*time.Second, 200*time.Millisecond, "the API server picks up the new caBundle")
	bad := findings(liveCheck(t), "webhook.answers")["Namespace/"+userNamespace]
	assert.Contains(t, bad.Message, `The API server could not call the Pod webhook: `)
	assert.Contains(t, bad.Message, `failed calling webhook "inject.pods.kvcache.gpustack.ai"`)
	assert.Contains(t, bad.Message, "x509")
	assert.Contains(t, bad.Fix, "caBundle verifies its certificate")
}

// otherCA is a CA that signed nothing the webhook serves.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not-the-webhook-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// A Pod injected before its store moved (the pool's Client endpoint changed: a backend
// re-created, another system namespace) is found drifted, with the key that differs and the fix;
// one still current passes.
func TestCheckFindsPodsInjectedForAStoreThatMoved(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	p, err := create(t, vllmPod(map[string]string{vocab.LabelInject: "true"}), "drifting")
	require.NoError(t, err)
	object := "Pod/" + userNamespace + "/" + p.Name
	current := findings(liveCheck(t), "pod.drift")[object]
	assert.Equal(t, check.Pass, current.Level, current.Message)

	ctx := context.Background()
	moveTo := func(endpoint string) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pool := &kvv1.KVCachePool{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: "shared-dram"}, pool); err != nil {
				return err
			}
			pool.Status.ClientEndpoint = endpoint
			return env.Client.Status().Update(ctx, pool)
		}))
	}
	moveTo("mooncake-dram-leader.kv-store.svc:50051")
	drift := findings(liveCheck(t), "pod.drift")[object]
	assert.Equal(t, check.Warn, drift.Level, drift.Message)
	assert.Contains(t, drift.Message, `master_server_address "mooncake-dram-leader.gpustack-system.svc:50051", now "mooncake-dram-leader.kv-store.svc:50051"`)
	assert.Contains(t, drift.Fix, "recreate the Pod")
}

// A Pod whose Binding was deleted runs on and caches nothing (its tenant left the store): check
// says so, naming the Binding and the way out.
func TestCheckReportsPodsWhoseBindingWasDeleted(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	p, err := create(t, vllmPod(map[string]string{vocab.LabelInject: "true"}), "orphaned")
	require.NoError(t, err)
	object := "Pod/" + userNamespace + "/" + p.Name
	assert.Empty(t, findings(liveCheck(t), "pod.binding")[object].Message, "a Pod whose Binding exists has no binding finding")

	ctx := context.Background()
	b := &kvv1.KVCachePoolBinding{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: userNamespace, Name: "team-a"}, b))
	require.NoError(t, env.Client.Delete(ctx, b))
	require.Eventually(t, func() bool {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), &kvv1.KVCachePoolBinding{})
		return apierrors.IsNotFound(err)
	}, 10*time.Second, 100*time.Millisecond, "the Binding gone")
	f := findings(liveCheck(t), "pod.binding")[object]
	assert.Equal(t, check.Fail, f.Level, f.Message)
	assert.Contains(t, f.Message, "KVCachePoolBinding team-a it writes under was deleted")
	assert.Contains(t, f.Message, "TENANT_NOT_REGISTERED")
	assert.Contains(t, f.Fix, "another Binding")
}

// A store whose Bindings span namespaces is reported when no NetworkPolicy is in force (as the
// manager measured it), and passes once it is.
func TestCheckReportsASharedStoreWithoutIsolation(t *testing.T) {
	applyCluster(t, filepath.Join(golden.Dir("inject"), "cluster.yaml"))
	ctx := context.Background()
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}})))
	other := &kvv1.KVCachePoolBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "team-b", Namespace: "team-b"},
		Spec: kvv1.KVCachePoolBindingSpec{PoolRef: kvv1.LocalReference{Name: "shared-dram"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("1Gi")},
			Domain: kvv1.Domain{Name: "team-b", BlockSize: 64, Dtype: "bfloat16"}},
	}
	require.NoError(t, env.Client.Create(ctx, other))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), other) })
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(other), &kvv1.KVCachePoolBinding{}) == nil
	}, 10*time.Second, 100*time.Millisecond)

	measured := func(status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			b := &kvv1.KVCacheBackend{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: "mooncake-dram"}, b); err != nil {
				return err
			}
			meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: kvv1.ConditionNetworkPolicyEnforced, Status: status, Reason: reason, Message: msg})
			return env.Client.Status().Update(ctx, b)
		}))
	}
	object := "KVCacheBackend/mooncake-dram"
	measured(metav1.ConditionFalse, kvv1.ReasonPolicyNotEnforced, "the manager's probe connection was answered")
	f := findings(liveCheck(t), "backend.isolation")[object]
	assert.Equal(t, check.Fail, f.Level, f.Message)
	assert.Contains(t, f.Message, "Its Bindings span the namespaces team-a, team-b, and no NetworkPolicy is in force: the manager's probe connection was answered")
	assert.Contains(t, f.Fix, "a backend of its own")

	measured(metav1.ConditionTrue, kvv1.ReasonPolicyEnforced, "the probe went unanswered")
	f = findings(liveCheck(t), "backend.isolation")[object]
	assert.Equal(t, check.Pass, f.Level, f.Message)
}
