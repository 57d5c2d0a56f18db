// Package webhook_test proves the admission webhooks through a real kube-apiserver: the
// configurations the chart installs (rendered from templates/webhooks) are installed pointing at
// a manager started in this process, and Pods are created the way kubectl creates them.
package webhook_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/internal/testenv"
)

const (
	// managerNamespace is where the manager would run: the Pod webhooks skip it, so objects
	// created there are stored exactly as submitted (the tests use it as a reference).
	managerNamespace = "kvcache-system"
	userNamespace    = "team-a"
)

var (
	env     *testenv.Env
	hooks   *envtest.WebhookInstallOptions
	stopMgr context.CancelFunc
	// managerCache is what the webhooks read first: a test waits for it to hold what it
	// applied, as a user applying a manifest a while before the Pods would find.
	managerCache client.Reader
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	r, err := generator.NewRenderer()
	if err != nil {
		return 0, err
	}
	objs, err := r.RenderWebhookConfigurations(generator.WebhookInput{
		Name: "kvcache-operator", Namespace: managerNamespace, Service: "kvcache-operator-webhook",
	})
	if err != nil {
		return 0, err
	}
	installed := testenv.WebhookInstallOptions(objs)
	hooks = &installed
	env, err = testenv.Start(func(e *envtest.Environment) { e.WebhookInstallOptions = *hooks })
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	hooks = &env.Environment().WebhookInstallOptions
	if err := startManager(); err != nil {
		return 0, err
	}
	defer func() { stopMgr() }()
	for _, ns := range []string{managerNamespace, userNamespace} {
		if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
	}
	// The chart installs the Setting catalog with its defaults.
	for name, value := range kvv1.SettingCatalog() {
		s := &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}
		if err := env.Client.Create(context.Background(), s); err != nil {
			return 0, err
		}
	}
	return m.Run(), nil
}

// startManager starts the manager's webhook server as `kvcache manager` would, serving on envtest's local
// webhook address, and waits until its webhook server answers TLS.
func startManager() error {
	mgr, err := manager.New(env.Config, manager.Options{
		SystemNamespace: managerNamespace,
		WebhookHost:     hooks.LocalServingHost, WebhookPort: hooks.LocalServingPort, CertDir: hooks.LocalServingCertDir,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		// The tests set pool status as the operator would; controllers would replace it with
		// what a store that is not running says.
		DisableControllers: true,
	})
	if err != nil {
		return err
	}
	managerCache = mgr.GetClient()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopMgr = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped with:", err)
		}
	}
	addr := net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort))
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe of a local test server
		if err == nil {
			_ = conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			stopMgr()
			return fmt.Errorf("webhook server at %s did not come up: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
