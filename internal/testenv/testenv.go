// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with
// this project's CRDs installed, once per test package. The binaries come from hack/tools.sh
// (`make tools`); when they are missing the suite fails, it never skips.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kvcache-operator/kvcache/generator"
)

// Env is a running API server with the CRDs installed.
type Env struct {
	env    *envtest.Environment
	Config *rest.Config
	Client client.Client
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start boots etcd and kube-apiserver and installs config/crd. It returns an error that names
// `make tools` when the binaries are not there.
func Start(opts ...func(*envtest.Environment)) (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: this suite needs a real kube-apiserver and etcd; run it with `make test` (which runs `make tools` to build them)")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%s not found in KUBEBUILDER_ASSETS=%s: run `make tools`", b, assets)
		}
	}
	e := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	for _, o := range opts {
		o(e)
	}
	cfg, err := e.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	s, err := generator.NewScheme()
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = e.Stop()
		return nil, err
	}
	return &Env{env: e, Config: cfg, Client: c}, nil
}

// Stop shuts the API server and etcd down.
func (e *Env) Stop() error { return e.env.Stop() }

// Environment exposes the underlying envtest environment (webhook install options, etc.).
func (e *Env) Environment() *envtest.Environment { return e.env }

// StartForTest boots an API server for one test and stops it when the test ends; a failure to
// start fails the test, saying what the suite needed it for and how to provide it.
func StartForTest(t testing.TB, purpose string, opts ...func(*envtest.Environment)) *Env {
	t.Helper()
	env, err := Start(opts...)
	if err != nil {
		t.Fatalf("%v\n%s runs against a real kube-apiserver and etcd: run `make tools` and `export KUBEBUILDER_ASSETS=$(hack/tools.sh assets)` (or use `make test`)", err, purpose)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping envtest: %v", err)
		}
	})
	return env
}

// BuildKvcache builds the kvcache binary into dir as the operator image ships it (static,
// CGO off) and returns its path: suites run the real CLI and manager, not an in-process copy.
func BuildKvcache(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "kvcache")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/kvcache")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kvcache: %w\n%s", err, b)
	}
	return out, nil
}

// WebhookInstallOptions installs the rendered webhook configurations (RenderWebhookConfigurations)
// pointed at envtest's local serving address instead of their Service.
func WebhookInstallOptions(objs []generator.Object) envtest.WebhookInstallOptions {
	var hooks envtest.WebhookInstallOptions
	for _, o := range objs {
		switch c := o.(type) {
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			hooks.MutatingWebhooks = append(hooks.MutatingWebhooks, c)
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			hooks.ValidatingWebhooks = append(hooks.ValidatingWebhooks, c)
		}
	}
	return hooks
}
