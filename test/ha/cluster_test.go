//go:build linux

package ha_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/vocab"
)

func startEnvtest(t *testing.T) *testenv.Env {
	t.Helper()
	ctrl.SetLogger(logr.Discard())
	return testenv.StartForTest(t, "the failover test")
}

// buildKvcache builds the kvcache binary as the operator image ships it.
func buildKvcache(t *testing.T) string {
	t.Helper()
	bin, err := testenv.BuildKvcache(t.Context(), t.TempDir())
	require.NoError(t, err)
	return bin
}

// renderedStore is what the operator renders for the test's backend.
type renderedStore struct {
	objects []generator.Object
	leader  *appsv1.Deployment
	member  *appsv1.DaemonSet
	seed    string // the tenant-quota-policy file the ConfigMap carries
}

// renderStore creates the backend (three leader replicas, so electing) in the API server, which
// defaults it, and renders its store with one registered tenant, as the operator would.
func renderStore(t *testing.T, c client.Client) renderedStore {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}))
	b := &kvv1.KVCacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: backendName},
		Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Leader: kvv1.Leader{Replicas: ptr.To[int32](3)},
			Members: []kvv1.MemberGroup{{
				NodeSelector:      map[string]string{"kubernetes.io/os": "linux"},
				Medium:            kvv1.MediumDRAM,
				CapacityPerMember: *resource.NewQuantity(segmentSize, resource.BinarySI),
				LocalBufferSize:   resource.NewQuantity(localBuffer, resource.BinarySI),
			}},
		}}},
	}
	require.NoError(t, c.Create(ctx, b))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(b), b))
	require.True(t, b.Spec.Connection.Managed.Leader.LeaseElection(), "three replicas elect a leader")
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	objs, err := r.RenderStore(generator.StoreInput{
		Backend: b, SystemNamespace: systemNamespace, BackendImageSetting: kvv1.DefaultKVCacheBackendImage,
		Tenants: []generator.Tenant{{Name: tenant, QuotaBytes: segmentSize}},
	})
	require.NoError(t, err)
	s := renderedStore{objects: objs}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			if o.Name == generator.LeaderName(backendName) {
				s.leader = o
			}
		case *appsv1.DaemonSet:
			if o.Name == generator.MemberName(backendName, 0) {
				s.member = o
			}
		case *corev1.ConfigMap:
			if o.Name == generator.QuotaPolicyName(backendName) {
				for _, v := range o.Data {
					s.seed = v
				}
			}
		}
	}
	require.NotNil(t, s.leader, "the leader Deployment is rendered")
	require.NotNil(t, s.member, "the member DaemonSet is rendered")
	require.Contains(t, s.seed, tenant, "the seed ledger lists the tenant")
	return s
}

// applyLeaderAccess creates the leader's ServiceAccount, Role and RoleBinding exactly as
// rendered: the launchers run with those grants and no others.
func applyLeaderAccess(t *testing.T, c client.Client, s renderedStore) {
	t.Helper()
	name := generator.LeaderName(backendName)
	var applied []string
	for _, o := range s.objects {
		switch o.(type) {
		case *corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding:
			if o.GetName() != name {
				continue
			}
			require.NoError(t, c.Create(t.Context(), o.(client.Object)))
			applied = append(applied, fmt.Sprintf("%T", o))
		}
	}
	slices.Sort(applied)
	require.Equal(t, []string{"*v1.Role", "*v1.RoleBinding", "*v1.ServiceAccount"}, applied, "the leader's account, role and binding are rendered")
}

// leaderKubeconfig is a kubeconfig that authenticates as the leader's ServiceAccount (a client
// certificate with its user name and groups), so RBAC judges the launchers exactly as it would
// their Pods' token.
func leaderKubeconfig(t *testing.T, env *testenv.Env) []byte {
	t.Helper()
	sa := generator.LeaderName(backendName)
	user, err := env.Environment().ControlPlane.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + systemNamespace + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + systemNamespace, "system:authenticated"},
	}, nil)
	require.NoError(t, err)
	kc, err := user.KubeConfig()
	require.NoError(t, err)
	// It is really that account: reading Pods is not in its grants.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = cs.CoreV1().Pods(systemNamespace).List(t.Context(), metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "the leader's account cannot list Pods: %v", err)
	return kc
}

// kubeconfigVia rewrites kc to reach the API server through addr (host:port).
func kubeconfigVia(t *testing.T, kc []byte, addr string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kc)
	require.NoError(t, err)
	for _, cl := range cfg.Clusters {
		u, err := url.Parse(cl.Server)
		require.NoError(t, err)
		u.Host = addr
		cl.Server = u.String()
	}
	out, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return out
}

// apiServerAddr is host:port of the envtest API server.
func apiServerAddr(t *testing.T, env *testenv.Env) string {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	require.NoError(t, err)
	if u.Host == "" { // a bare host:port
		return env.Config.Host
	}
	return u.Host
}

// createLeaderPod creates a leader Pod as the Deployment controller would, from the rendered
// template, with the IP a kubelet would report. No kubelet runs it: it is the object the
// launcher labels and its peers check its address against.
func createLeaderPod(t *testing.T, c client.Client, s renderedStore, name, ip string) {
	t.Helper()
	tpl := s.leader.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: name, Labels: tpl.Labels},
		Spec:       *tpl.Spec.DeepCopy(),
	}
	require.NoError(t, c.Create(t.Context(), pod))
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	require.NoError(t, c.Status().Update(t.Context(), pod))
}

// setPodReady sets the Pod's Ready condition as a kubelet reports it ("" removes it: nothing
// reports on the Pod).
func setPodReady(t *testing.T, c client.Client, name string, status corev1.ConditionStatus) {
	t.Helper()
	pod := &corev1.Pod{}
	require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: systemNamespace, Name: name}, pod))
	pod.Status.Conditions = nil
	if status != "" {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	}
	require.NoError(t, c.Status().Update(t.Context(), pod))
}

// launcherFlags are the rendered `kvcache elect` flags (between "elect" and "--"), without the
// peer port, which the test gives a free one.
func launcherFlags(t *testing.T, s renderedStore) []string {
	t.Helper()
	ctr := s.leader.Spec.Template.Spec.Containers[0]
	require.NotEmpty(t, ctr.Args)
	require.Equal(t, "elect", ctr.Args[0], "the leader container runs the launcher: %v", ctr.Args)
	end := slices.Index(ctr.Args, "--")
	require.Positive(t, end)
	var flags []string
	sawPeer := false
	for _, a := range ctr.Args[1:end] {
		if flagKey(a) == "peer_port" {
			sawPeer = true
			continue
		}
		flags = append(flags, a)
	}
	require.True(t, sawPeer, "the rendered launcher talks to its peers: %v", ctr.Args)
	return flags
}

// nativeHAFlags are mooncake_master's own HA flags: its Kubernetes backend is in no published
// build (the master exits 255 on them), so under the launcher they are not passed.
var nativeHAFlags = []string{"enable_ha", "ha_backend_type", "ha_backend_connstring", "rpc_address", "cluster_id", "pod_name", "pod_namespace"}

func flagKey(arg string) string {
	k, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return strings.ReplaceAll(k, "-", "_")
}

// masterArgv is the rendered master command line: after "--" when the leader container
// already runs the launcher, the container's command and args otherwise, without the native
// HA flags; the ports moved to free loopback ones, the ledger to the launcher's own copy of
// the seed (its emptyDir), the admin API on loopback only.
func masterArgv(t *testing.T, s renderedStore, rpcPort, adminPort int) func(policy string) []string {
	t.Helper()
	require.Len(t, s.leader.Spec.Template.Spec.Containers, 1)
	ctr := s.leader.Spec.Template.Spec.Containers[0]
	full := append(slices.Clone(ctr.Command), ctr.Args...)
	if i := slices.Index(full, "--"); i >= 0 {
		full = full[i+1:]
	}
	require.NotEmpty(t, full)
	require.Equal(t, "mooncake_master", full[0], "the leader runs the stock master: %v", full)
	var keep []string
	var sawRPC, sawAdmin, sawPolicy bool
	for _, a := range full[1:] {
		k := flagKey(a)
		if slices.Contains(nativeHAFlags, k) {
			continue
		}
		switch k {
		case "rpc_port":
			sawRPC = true
		case "metrics_port":
			sawAdmin = true
		case "tenant_quota_connector_uri":
			sawPolicy = true
		}
		keep = append(keep, a)
	}
	require.True(t, sawRPC && sawAdmin && sawPolicy, "the rendered master flags carry the ports and the ledger: %v", full)
	return func(policy string) []string {
		argv := []string{full[0]}
		for _, a := range keep {
			switch flagKey(a) {
			case "rpc_port":
				a = "-rpc_port=" + strconv.Itoa(rpcPort)
			case "metrics_port":
				a = "-metrics_port=" + strconv.Itoa(adminPort)
			case "tenant_quota_connector_uri":
				a = "-tenant_quota_connector_uri=" + policy
			}
			argv = append(argv, a)
		}
		return append(argv, "-metrics_host=127.0.0.1")
	}
}

// memberEnv is the rendered member env, resolved as the kubelet would for a member Pod on
// 127.0.0.1, with the leader Service's address standing for the serving master's.
func memberEnv(t *testing.T, s renderedStore, rpcAddr string) []string {
	t.Helper()
	require.Len(t, s.member.Spec.Template.Spec.Containers, 1)
	var env []string
	for _, e := range s.member.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.Name == "MOONCAKE_MASTER":
			require.Equal(t, generator.LeaderName(backendName)+"."+systemNamespace+".svc:50051", e.Value, "members address the leader Service")
			env = append(env, e.Name+"="+rpcAddr)
		case e.ValueFrom != nil:
			require.NotNil(t, e.ValueFrom.FieldRef, "env %s", e.Name)
			require.Equal(t, "status.podIP", e.ValueFrom.FieldRef.FieldPath, "env %s", e.Name)
			env = append(env, e.Name+"=127.0.0.1")
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// leaseOf reads the backend's Lease.
func leaseOf(ctx context.Context, c client.Client) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: generator.LeaderName(backendName)}, l)
	return l, err
}

// leaderLabel is the store-leader label on a leader Pod ("" when absent).
func leaderLabel(ctx context.Context, c client.Client, pod string) (string, error) {
	p := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: pod}, p); err != nil {
		return "", err
	}
	return p.Labels[vocab.LabelStoreLeader], nil
}

// poll retries f every 20 ms until it returns nil or d passes, and returns when it succeeded
// and the last error.
func poll(d time.Duration, f func() error) (time.Time, error) {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, ...
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			kids = append(kids, n)
		}
	}
	return kids
}
