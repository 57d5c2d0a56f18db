package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kvcache-operator/kvcache/generator"
)

// env is what every test shares: the cluster's client, one namespace for this run, and facts
// read from the scripts (never assumed).
type environment struct {
	repo       string
	config     *rest.Config
	client     *kubernetes.Clientset
	kube       client.Client // the same cluster through the project's scheme (its API kinds)
	kubeconfig string
	namespace  string
	sockets    []string          // one containerd per node
	nodeSocket map[string]string // node name -> its containerd socket
	state      string            // hack/cluster.sh's state directory
	images     map[string]string
	helm       string // the helm binary hack/tools.sh builds
	kubectl    string
}

var env environment

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	env.repo = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if os.Geteuid() != 0 {
		return failf("must run as root: hack/cluster.sh creates bridges, iptables rules, cgroups and mounts")
	}

	suite := time.Now()
	defer func() {
		fmt.Fprintf(os.Stderr, "test/cluster: the suite took %s\n", time.Since(suite).Round(100*time.Millisecond))
	}()
	started := false
	var host hostPicture
	if _, err := script("hack/cluster.sh", "status"); err != nil {
		// Packages installed by the first up on a fresh machine would read as the cluster's
		// changes: the picture is of the host as the cluster's prerequisites leave it.
		if out, err := script("hack/cluster.sh", "prereqs"); err != nil {
			return failf("hack/cluster.sh prereqs failed (%v); this machine cannot run the cluster:\n%s", err, out)
		}
		picture, err := takeHostPicture()
		if err != nil {
			return failf("%v", err)
		}
		host = picture
		// The suite's cluster comes up after a failed up, which must have left nothing behind.
		if code := failedUp(host); code != 0 {
			return code
		}
		t0 := time.Now()
		if out, err := script("hack/cluster.sh", "up"); err != nil {
			return failf("hack/cluster.sh up failed (%v); this machine cannot run the cluster:\n%s", err, out)
		}
		started = true
		fmt.Fprintf(os.Stderr, "test/cluster: hack/cluster.sh up took %s\n", time.Since(t0).Round(100*time.Millisecond))
	} else {
		fmt.Fprintln(os.Stderr, "test/cluster: using the running cluster (left running; the failed-up and host checks run only on a cluster the suite starts)")
	}
	code := runTests(m)
	writeFigures()
	if started && os.Getenv("KVCACHE_CLUSTER_KEEP") == "" {
		// A teardown that leaves the host changed is a failure too.
		t0 := time.Now()
		if out, err := script("hack/cluster.sh", "down"); err != nil {
			fmt.Fprintf(os.Stderr, "test/cluster: hack/cluster.sh down failed (%v):\n%s", err, out)
			code = 1
		}
		fmt.Fprintf(os.Stderr, "test/cluster: hack/cluster.sh down took %s\n", time.Since(t0).Round(100*time.Millisecond))
		if left := host.changes(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "test/cluster: hack/cluster.sh down left the host changed:\n  %s\n", strings.Join(left, "\n  "))
			code = 1
		}
	}
	return code
}

// failedUp runs an up whose node-0 containerd exits at once (hack/cluster.sh's test-only hook):
// up must fail saying which process exited and how, and take down every process it started
// (etcd, the API server, both containerds), leaving the host as the picture shows it.
func failedUp(host hostPicture) int {
	t0 := time.Now()
	out, err := scriptEnv([]string{"KVCACHE_CLUSTER_TEST_CONTAINERD_EXITS=1"}, "hack/cluster.sh", "up")
	if err == nil {
		downOut, _ := script("hack/cluster.sh", "down")
		return failf("hack/cluster.sh up succeeded though containerd-0 exited at once:\n%s\n%s", out, downOut)
	}
	for _, want := range []string{"containerd-0 exited (pid ", "exit status 1) while waiting for containerd-0",
		"flag provided but not defined", "up failed: taking down what it started", "cluster: down in "} {
		if !strings.Contains(out, want) {
			return failf("hack/cluster.sh up with a containerd that exits at once: no %q in its output:\n%s", want, out)
		}
	}
	if left := host.changes(); len(left) > 0 {
		return failf("a failed hack/cluster.sh up left the host changed:\n  %s\nits output:\n%s", strings.Join(left, "\n  "), out)
	}
	fmt.Fprintf(os.Stderr, "test/cluster: an up whose containerd exited at once failed and left nothing, in %s\n", time.Since(t0).Round(100*time.Millisecond))
	return 0
}

// runTests loads the images, connects to the cluster, and runs the tests in a namespace of
// their own.
func runTests(m *testing.M) int {
	t0 := time.Now()
	if out, err := script("hack/images.sh", "load"); err != nil {
		return failf("hack/images.sh load failed (%v):\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "test/cluster: hack/images.sh load took %s\n", time.Since(t0).Round(100*time.Millisecond))

	env.images = map[string]string{}
	for _, image := range []string{"operator", "store", "engine", "vllm"} {
		out, err := script("hack/images.sh", "name", image)
		if err != nil {
			return failf("hack/images.sh name %s: %v\n%s", image, err, out)
		}
		env.images[image] = strings.TrimSpace(out)
	}
	out, err := script("hack/cluster.sh", "sockets")
	if err != nil {
		return failf("hack/cluster.sh sockets: %v\n%s", err, out)
	}
	env.sockets = strings.Fields(out)
	env.nodeSocket = map[string]string{}
	for _, sock := range env.sockets {
		// <state>/node-<i>/containerd/containerd.sock serves node node-<i>.
		env.nodeSocket[filepath.Base(filepath.Dir(filepath.Dir(sock)))] = sock
	}
	out, err = script("hack/cluster.sh", "kubeconfig")
	if err != nil {
		return failf("hack/cluster.sh kubeconfig: %v\n%s", err, out)
	}
	env.kubeconfig = strings.TrimSpace(out)
	env.state = filepath.Dir(env.kubeconfig)
	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	if err != nil {
		return failf("kubeconfig %s: %v", env.kubeconfig, err)
	}
	env.config = cfg
	if env.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return failf("client: %v", err)
	}
	scheme, err := generator.NewScheme()
	if err != nil {
		return failf("scheme: %v", err)
	}
	if env.kube, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return failf("client: %v", err)
	}
	// The real helm and kubectl, as a user runs them (make test exports KVCACHE_HELM).
	env.helm = os.Getenv("KVCACHE_HELM")
	for name, into := range map[string]*string{"helm": &env.helm, "kubectl": &env.kubectl} {
		if *into != "" {
			continue
		}
		out, err := script("hack/tools.sh", "path", name)
		if err != nil {
			return failf("hack/tools.sh path %s (make tools builds it): %v\n%s", name, err, out)
		}
		*into = strings.TrimSpace(lastLine(out))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env.namespace = "cluster-smoke-" + rand.String(5)
	if _, err := env.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: env.namespace}}, metav1.CreateOptions{}); err != nil {
		return failf("create namespace %s: %v", env.namespace, err)
	}
	// A namespace's Pods need its default ServiceAccount, which a controller creates.
	if err := poll(ctx, time.Minute, func() (bool, error) {
		_, err := env.client.CoreV1().ServiceAccounts(env.namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return failf("namespace %s never got its default ServiceAccount: %v", env.namespace, err)
	}
	code := m.Run()
	// When the cluster stays, this run's objects do not.
	_ = env.client.CoreV1().Namespaces().Delete(context.Background(), env.namespace, metav1.DeleteOptions{})
	return code
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func failf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "test/cluster: "+format+"\n", args...)
	return 1
}

// script runs one of the repository's scripts and returns its combined output. The bound is
// generous: on a cold machine `up` builds the cluster binaries and `load` the images.
func script(name string, args ...string) (string, error) {
	return scriptEnv(nil, name, args...)
}

// scriptEnv is script with variables added to the environment.
func scriptEnv(vars []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.repo, name), args...)
	cmd.Dir = env.repo
	cmd.Env = append(os.Environ(), vars...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

var errTimeout = errors.New("timed out")

// poll calls cond every 250ms until it reports done, returns an error, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := cond()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// figuresFile is where the suite leaves what it measured, passed or failed: go test shows a
// passing package's log only with -v, and make test runs without it (.ci/run prints the file).
const figuresFile = "_output/test-cluster-figures.txt"

func writeFigures() {
	path := filepath.Join(env.repo, figuresFile)
	if len(figures) == 0 {
		_ = os.Remove(path) // not an earlier run's
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		err = os.WriteFile(path, []byte(strings.Join(figures, "\n")+"\n"), 0o644)
		if err == nil {
			fmt.Fprintf(os.Stderr, "test/cluster: %d figures in %s\n", len(figures), figuresFile)
			return
		}
	}
	fmt.Fprintf(os.Stderr, "test/cluster: the figures could not be written to %s\n", figuresFile)
}
