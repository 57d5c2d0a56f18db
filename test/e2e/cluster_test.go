//go:build linux

package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/internal/testenv"
)

// The cluster side: a real kube-apiserver and etcd (envtest) with the operator's controllers
// running in-process. There is no kubelet, scheduler or controller-manager: the helpers below
// do what those components would (run init containers, project volumes, resolve fieldRef env,
// report Pod and Deployment status) and say so.

const pollInterval = time.Second

// startEnvtest boots a kube-apiserver and etcd with the CRDs; they stop when the test ends.
func startEnvtest(t *testing.T) *testenv.Env {
	t.Helper()
	ctrl.SetLogger(logr.Discard())
	return testenv.StartForTest(t, "the end-to-end test")
}

// cacheInUseWindow is the manager's --cache-in-use-window here: short, so a Pod that never
// writes is reported within the test.
const cacheInUseWindow = 4 * time.Second

// startManager starts the operator's manager (controllers only) with every managed backend's
// admin API pointed at adminAddr (external backends are reached at their declared Admin
// endpoint). It stops when the test ends, before envtest. The controllers' names are
// process-wide, so one test of the package starts a manager.
func startManager(t *testing.T, env *testenv.Env, adminAddr string) {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{
		SystemNamespace:    systemNamespace,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		// The backend's admin API is the real master's admin port on loopback (in a cluster it
		// is <backend>-leader.<ns>.svc:9003, which nothing here resolves).
		AdminAddress: func(b *kvv1.KVCacheBackend) string {
			if b.Spec.Connection.External != nil {
				return ""
			}
			return adminAddr
		},
		PollInterval:     pollInterval,
		CacheInUseWindow: cacheInUseWindow,
		// Webhooks are proven in test/webhook; injection is called directly below.
		DisableWebhooks: true,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager stopped with: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("manager did not stop within 15s")
		}
	})
}

// eventually re-reads obj (uncached, from the API server) until cond holds or d passes, and
// returns the last read. The failure message carries the last object's status.
func eventually[T client.Object](t *testing.T, c client.Client, obj T, d time.Duration, what string, cond func(T) bool) T {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	deadline := time.Now().Add(d)
	var lastErr error
	for {
		lastErr = c.Get(context.Background(), key, obj)
		if lastErr == nil && cond(obj) {
			return obj
		}
		if time.Now().After(deadline) {
			t.Fatalf("%T %s: %s: not within %s (last error: %v); last read: %s", obj, key, what, d, lastErr, statusOf(obj))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func statusOf(o client.Object) string {
	switch x := o.(type) {
	case *kvv1.KVCacheBackend:
		return fmt.Sprintf("%+v", x.Status)
	case *kvv1.KVCachePool:
		return fmt.Sprintf("%+v", x.Status)
	case *kvv1.KVCachePoolBinding:
		return fmt.Sprintf("%+v", x.Status)
	}
	return fmt.Sprintf("%+v", o)
}

func condition(conds []metav1.Condition, t string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// rollOutLeader sets the leader Deployment's status as the Deployment controller and the
// kubelet would once its Pod's readiness probe passes: every replica updated, one ready.
func rollOutLeader(t *testing.T, c client.Client, d *appsv1.Deployment) {
	t.Helper()
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(d), d))
	replicas := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, c.Status().Update(context.Background(), d))
}

// scheduleMemberPod creates the Pod the member DaemonSet would create on a node, from its
// template, and sets the status the kubelet would report once its sandbox runs: Running, with
// the given Pod IP, not ready yet (the containers' env resolves status.podIP from it).
func scheduleMemberPod(t *testing.T, c client.Client, ds *appsv1.DaemonSet, node, ip string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name + "-" + node, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	p.Spec.NodeName = node
	require.NoError(t, c.Create(ctx, p))
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	require.NoError(t, c.Status().Update(ctx, p))
	return p
}

// markPodReady sets the Ready condition as the kubelet does once the readiness probe passes.
func markPodReady(t *testing.T, c client.Client, p *corev1.Pod) {
	t.Helper()
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(p), p))
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	require.NoError(t, c.Status().Update(context.Background(), p))
}

// resolveEnv turns a container's env into NAME=value pairs as the kubelet would for pod:
// literal values, and the downward-API fields the rendered manifests use.
func resolveEnv(t *testing.T, env []corev1.EnvVar, pod *corev1.Pod) []string {
	t.Helper()
	var out []string
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			var v string
			switch e.ValueFrom.FieldRef.FieldPath {
			case "status.podIP":
				v = pod.Status.PodIP
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			default:
				t.Fatalf("env %s: fieldRef %s is not emulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			require.NotEmpty(t, v, "env %s: %s is empty on Pod %s", e.Name, e.ValueFrom.FieldRef.FieldPath, pod.Name)
			out = append(out, e.Name+"="+v)
		default:
			t.Fatalf("env %s: valueFrom %+v is not emulated", e.Name, e.ValueFrom)
		}
	}
	return out
}

// podVolumes stands in for the kubelet's volume setup of one Pod: a fresh directory per
// emptyDir, a directory holding each key of a configMap volume as a file (the ConfigMap as the
// API server has it now), and a downwardAPI volume's annotation items.
type podVolumes map[string]string

func setUpVolumes(t *testing.T, c client.Client, ns string, podMeta metav1.ObjectMeta, volumes []corev1.Volume) podVolumes {
	t.Helper()
	dirs := podVolumes{}
	for _, v := range volumes {
		dir := t.TempDir()
		dirs[v.Name] = dir
		switch {
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			cm := &corev1.ConfigMap{}
			require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: v.ConfigMap.Name}, cm), "volume %s", v.Name)
			require.NotEmpty(t, cm.Data, "ConfigMap %s of volume %s", cm.Name, v.Name)
			for k, data := range cm.Data {
				require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(data), 0o644))
			}
		case v.DownwardAPI != nil:
			for _, item := range v.DownwardAPI.Items {
				require.NotNil(t, item.FieldRef, "volume %s item %s", v.Name, item.Path)
				key, ok := strings.CutPrefix(item.FieldRef.FieldPath, "metadata.annotations['")
				require.True(t, ok, "volume %s item %s: fieldRef %s is not emulated", v.Name, item.Path, item.FieldRef.FieldPath)
				key = strings.TrimSuffix(key, "']")
				value, found := podMeta.Annotations[key]
				require.True(t, found, "volume %s item %s: the Pod has no annotation %s", v.Name, item.Path, key)
				require.NoError(t, os.WriteFile(filepath.Join(dir, item.Path), []byte(value), 0o644))
			}
		default:
			t.Fatalf("volume %s: kind not emulated: %+v", v.Name, v.VolumeSource)
		}
	}
	return dirs
}

// hostPath maps a path inside a container to the directory that backs it, through the
// container's volume mounts. A path under no mount would be in the image: the test fails.
func (v podVolumes) hostPath(t *testing.T, mounts []corev1.VolumeMount, p string) string {
	t.Helper()
	for _, m := range mounts {
		if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			dir, ok := v[m.Name]
			require.True(t, ok, "mount %s names no volume of the Pod", m.Name)
			return filepath.Join(dir, strings.TrimPrefix(p, m.MountPath))
		}
	}
	t.Fatalf("%s is under no volume mount of the container (%+v)", p, mounts)
	return ""
}

// runInitContainer runs an init container's command on this machine with its paths mapped to
// the Pod's volumes, as the kubelet would run it before the main container.
func runInitContainer(t *testing.T, vols podVolumes, c corev1.Container) {
	t.Helper()
	require.NotEmpty(t, c.Command, "init container %s", c.Name)
	argv := append(append([]string(nil), c.Command...), c.Args...)
	for i := 1; i < len(argv); i++ {
		if strings.HasPrefix(argv[i], "/") {
			argv[i] = vols.hostPath(t, c.VolumeMounts, argv[i])
		}
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	require.NoError(t, err, "init container %s (%v): %s", c.Name, argv, out)
}

// kubectl runs the envtest kubectl as an administrator and returns its output.
func kubectl(t *testing.T, env *testenv.Env, args ...string) string {
	t.Helper()
	bin := filepath.Join(env.Environment().BinaryAssetsDirectory, "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kubectl in KUBEBUILDER_ASSETS (%v): run `make tools`", err)
	}
	user, err := env.Environment().ControlPlane.AddUser(envtest.User{Name: "kvcache-e2e-admin", Groups: []string{"system:masters"}}, nil)
	require.NoError(t, err)
	kc, err := user.KubeConfig()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(p, kc, 0o600))
	out, err := exec.Command(bin, append([]string{"--kubeconfig", p}, args...)...).CombinedOutput()
	require.NoError(t, err, "kubectl %v: %s", args, out)
	return string(out)
}
