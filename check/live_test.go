package check

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type pair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// issue makes a certificate valid until notAfter, signed by parent (self-signed when nil).
func issue(t *testing.T, cn string, notAfter time.Time, parent *pair, dns ...string) *pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter, DNSNames: dns}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &pair{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// webhookCluster is the chart's shape: a webhook configuration calling a Service whose Pod
// mounts the serving certificate's Secret at its --cert-dir.
func webhookCluster(t *testing.T, caBundle, servingPEM []byte) client.Client {
	t.Helper()
	s, err := generator.NewScheme()
	require.NoError(t, err)
	labels := map[string]string{"app": "kvcache"}
	objs := []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kvcache"}, Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: WebhookInject, ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: caBundle,
				Service: &admissionregistrationv1.ServiceReference{Namespace: "kvcache-system", Name: "kvcache-webhook"}},
		}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kvcache-system", Name: "kvcache-webhook"}, Spec: corev1.ServiceSpec{Selector: labels}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kvcache-system", Name: "kvcache-0", Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "manager", Command: []string{"kvcache"}, Args: []string{"manager", "--cert-dir=/var/run/certs"},
				VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/var/run/certs"}}}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "kvcache-cert"}}}},
		}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kvcache-system", Name: "kvcache-cert"}, Data: map[string][]byte{corev1.TLSCertKey: servingPEM}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: generator.DefaultSystemNamespace, Name: ManagerLease}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("kvcache-0_1"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: now.Add(-3 * time.Second)}}},
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}

func run(t *testing.T, c client.Client) *Report {
	t.Helper()
	r := &live{c: c, o: LiveOptions{SystemNamespace: generator.DefaultSystemNamespace, CertWarning: 30 * 24 * time.Hour}, r: &Report{}, now: now}
	require.NoError(t, r.webhooks(context.Background()))
	require.NoError(t, r.managerLease(context.Background()))
	return r.r
}

func levels(r *Report, check string) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Check == check {
			out = append(out, string(f.Level)+" "+f.Message)
		}
	}
	return out
}

func TestTheCABundleMustVerifyTheServedCertificate(t *testing.T) {
	dns := "kvcache-webhook.kvcache-system.svc"
	ca := issue(t, "kvcache-ca", now.Add(10*365*24*time.Hour), nil)
	serving := issue(t, dns, now.Add(365*24*time.Hour), ca, dns)

	r := run(t, webhookCluster(t, ca.pem, serving.pem))
	assert.Equal(t, []string{"PASS The caBundle verifies the serving certificate (Secret kvcache-system/kvcache-cert) for " + dns + "."}, levels(r, "webhook.certificate"))
	assert.Equal(t, []string{"PASS kvcache-0_1 leads the controllers (renewed 3s ago)."}, levels(r, "manager.lease"))

	other := issue(t, "someone-else", now.Add(24*time.Hour*365), nil)
	r = run(t, webhookCluster(t, other.pem, serving.pem))
	got := levels(r, "webhook.certificate")
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "FAIL The caBundle does not verify the certificate the webhook serves (Secret kvcache-system/kvcache-cert) for "+dns+": x509: certificate signed by unknown authority")

	wrongName := issue(t, "elsewhere", now.Add(365*24*time.Hour), ca, "elsewhere.svc")
	got = levels(run(t, webhookCluster(t, ca.pem, wrongName.pem)), "webhook.certificate")
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "FAIL The caBundle does not verify", "a certificate for another name does not serve this Service")

	soon := issue(t, dns, now.Add(10*24*time.Hour), ca, dns)
	assert.Equal(t, []string{
		"PASS The caBundle verifies the serving certificate (Secret kvcache-system/kvcache-cert) for " + dns + ".",
		"WARN The serving certificate expires on 2026-12-11, in 10 days.",
	}, levels(run(t, webhookCluster(t, ca.pem, soon.pem)), "webhook.certificate"))

	assert.Equal(t, []string{"FAIL The caBundle is empty, so the API server cannot verify the webhook and every call fails."},
		levels(run(t, webhookCluster(t, nil, serving.pem)), "webhook.certificate"))
}

func TestAStaleManagerLeaseFails(t *testing.T) {
	c := webhookCluster(t, nil, nil)
	l := &coordinationv1.Lease{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: generator.DefaultSystemNamespace, Name: ManagerLease}, l))
	l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-time.Minute)}
	require.NoError(t, c.Update(context.Background(), l))
	assert.Equal(t, []string{"FAIL kvcache-0_1 holds the Lease but last renewed it 1m0s ago, longer than its 15s duration: the controllers have no live leader."}, levels(run(t, c), "manager.lease"))

	l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-17 * time.Second)}
	require.NoError(t, c.Update(context.Background(), l))
	assert.Equal(t, []string{"WARN kvcache-0_1 last renewed the Lease 17s ago, past its 15s duration: a handover of the controllers is under way (a standby or a restarted replica takes it within another 15s)."}, levels(run(t, c), "manager.lease"),
		"a Lease just past its duration is a handover under way, not a store without a leader")
}

func TestTheSelfManagedCertificateIsFoundByItsSecretName(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Args: []string{
		"manager", "--cert-dir=/var/run/kvcache/serving-certs", "--cert-mode=self", "--cert-secret-name=kvcache-webhook-cert"}}}}}
	assert.Equal(t, "kvcache-webhook-cert", certSecret(p), "the manager serves it from the Secret, whatever is mounted at --cert-dir")
}

func TestHitsSayWhatTheEnginesCounted(t *testing.T) {
	l := &live{r: &Report{}, now: now}
	obs := metav1.Time{Time: now}
	l.hits("binding.hits", "KVCachePoolBinding/team-a/team-a", nil)
	l.hits("binding.hits", "KVCachePoolBinding/team-a/team-a", &kvv1.StoreHits{Window: metav1.Duration{Duration: 15 * time.Minute},
		Since: metav1.Time{Time: now.Add(-15 * time.Minute)}, PromptTokens: 3006, StoreTokens: 2816, Ratio: "93.7%", Pods: 2, ObservedTime: obs})
	l.hits("binding.hits", "KVCachePoolBinding/team-b/team-b", &kvv1.StoreHits{Window: metav1.Duration{Duration: 15 * time.Minute},
		Since: metav1.Time{Time: now.Add(-90 * time.Second)}, Pods: 1, Unread: 1, ObservedTime: obs,
		Message: "1 of 2 Ready engine Pods could not be read: pod team-b/chat-1: GET http://10.244.1.9:8000/metrics: connection refused"})
	assert.Equal(t, []string{
		"PASS The store served 2816 of the 3006 prompt tokens 2 engine Pods were asked over the last 15m0s (93.7% hit rate).",
		"WARN The store served 0 of the 0 prompt tokens 1 engine Pod was asked over the 1m30s since its engines were first read (no prompt asked); 1 of 2 Ready engine Pods could not be read: pod team-b/chat-1: GET http://10.244.1.9:8000/metrics: connection refused.",
	}, levels(l.r, "binding.hits"))
}
