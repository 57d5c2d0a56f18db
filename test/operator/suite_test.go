// Package operator_test runs the controllers against a real kube-apiserver and etcd, with a
// fake Mooncake master (store/storetest) in place of each store's admin API. There is
// no kubelet or controller-manager here: the tests create the Pods a DaemonSet would and set
// Deployment and Pod status as those components would, and say so where they do.
package operator_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/store/storetest"
)

const systemNamespace = "gpustack-system"

// cacheInUseWindow is the suite manager's --cache-in-use-window: short, so Pods that never
// write are reported within a test.
const cacheInUseWindow = 3 * time.Second

var (
	env *testenv.Env
	// cached reads through the suite manager's cache (opted-in Pods indexed by their Binding).
	cached client.Client

	storesMu sync.Mutex
	stores   = map[string]*storetest.Fake{}
)

// fakeStore registers the fake master a backend's admin address resolves to.
func fakeStore(t testing.TB, backend string, opts storetest.FakeOptions) *storetest.Fake {
	t.Helper()
	f := storetest.NewFake(opts)
	storesMu.Lock()
	stores[backend] = f
	storesMu.Unlock()
	t.Cleanup(func() {
		storesMu.Lock()
		delete(stores, backend)
		storesMu.Unlock()
		f.Close()
	})
	return f
}

func adminAddress(b *kvv1.KVCacheBackend) string {
	storesMu.Lock()
	defer storesMu.Unlock()
	if f, ok := stores[b.Name]; ok {
		return f.URL()[len("http://"):]
	}
	return "127.0.0.1:1" // nothing listens: the store is unreachable
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	// KVCACHE_TEST_LOGS=1 shows the controllers' logs.
	if os.Getenv("KVCACHE_TEST_LOGS") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	var err error
	env, err = testenv.Start()
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	for _, ns := range []string{systemNamespace, "team-a", "team-b"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return 0, err
		}
	}
	for name, value := range kvv1.SettingCatalog() {
		if err := env.Client.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}); err != nil {
			return 0, err
		}
	}
	mgr, err := manager.New(env.Config, manager.Options{
		SystemNamespace: systemNamespace, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		AdminAddress: adminAddress, PollInterval: 500 * time.Millisecond, CacheInUseWindow: cacheInUseWindow,
		// Webhooks are proven in test/webhook; nothing here registers their configurations.
		DisableWebhooks: true,
	})
	if err != nil {
		return 0, err
	}
	cached = mgr.GetClient()
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped with:", err)
		}
	}()
	return m.Run(), nil
}
