//go:build linux

// Package e2e_test runs the operator against a REAL Mooncake store: the controllers run against a real kube-apiserver and etcd (envtest), and the
// store's processes are the PyPI wheel's mooncake_master and mc_store_rest_server on loopback,
// started from what the operator rendered into the cluster. A Python client configured from the
// injected mooncake.json moves real bytes through them.
//
// Nothing here runs containers: the test does what the kubelet and the built-in controllers
// would do with the rendered objects (run the init container, resolve env, report status), and
// says so where it does. The wheel is Linux-only, hence the build tag. hack/mooncake.sh and
// KUBEBUILDER_ASSETS (`make tools`) are required: without them the test fails, never skips.
package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

const (
	systemNamespace = "gpustack-system"
	backendName     = "mooncake-dram"
	poolName        = "shared-dram"
	tenantNamespace = "team-a"
	bindingName     = "team-a"
	domainName      = "team-a-chat"

	segmentSize     = 256 << 20 // capacityPerMember
	memberBuffer    = 16 << 20  // the member group's localBufferSize
	ceilingBytes    = 128 << 20 // the Binding's ceiling
	payloadBytes    = 1 << 20   // what the engine client puts
	clientBufferLen = 134217728 // local_buffer_size injection writes

	// How long the operator gets for each transition (PollInterval is 1 s).
	settle = 20 * time.Second
)

// The master's flags as the leader template renders them for this backend (no election,
// multi-tenancy on, the default allocation strategy), in the documented order.
var renderedMasterArgs = []string{
	"-rpc_port=50051",
	"-metrics_port=9003",
	"-default_kv_lease_ttl=5m",
	"-allocation_strategy=free_ratio_first",
	"-enable_multi_tenants=true",
	"-tenant_quota_connector_uri=/var/lib/mooncake/tenant-quota-policy.yaml",
}

// The member's env as the member template renders it for this backend's group 0.
var renderedMemberEnv = []corev1.EnvVar{
	{Name: "MOONCAKE_MASTER", Value: "mooncake-dram-leader.gpustack-system.svc:50051"},
	{Name: "MOONCAKE_TE_META_DATA_SERVER", Value: "P2PHANDSHAKE"},
	{Name: "MOONCAKE_PROTOCOL", Value: "tcp"},
	{Name: "MOONCAKE_LOCAL_HOSTNAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
	{Name: "MOONCAKE_GLOBAL_SEGMENT_SIZE", Value: "268435456"},
	{Name: "MOONCAKE_LOCAL_BUFFER_SIZE", Value: "16777216"},
	{Name: "MC_TE_METRIC", Value: "1"},
	{Name: "KVCACHE_MASTER_ADMIN", Value: "mooncake-dram-leader.gpustack-system.svc:9003"},
	{Name: "KVCACHE_POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
	{Name: "MC_RPC_CONNECT_TIMEOUT_MS", Value: "1000"},
}

// The seed ledger file the ConfigMap carries once the Binding exists.
const seededPolicy = "version: 1\ntenants:\n  - name: \"team-a-chat\"\n    quota: 134217728\n"

// leaderRun is one emulated leader Pod's master process and where its ledger file lives.
type leaderRun struct {
	policy string // host path of -tenant_quota_connector_uri
	proc   *mooncaketest.Proc
}

func TestRealStoreEndToEnd(t *testing.T) {
	testStart := time.Now()
	bin := mooncaketest.Bin(t, "python")
	env := startEnvtest(t)
	c := env.Client
	// The store's ports, picked once the API server and etcd hold theirs.
	ports := mooncaketest.FreePorts(t, 3)
	rpcPort, adminPort, restPort := ports[0], ports[1], ports[2]
	rpcAddr := "127.0.0.1:" + strconv.Itoa(rpcPort)
	admin := adminAPI{base: "http://127.0.0.1:" + strconv.Itoa(adminPort)}
	startManager(t, env, "127.0.0.1:"+strconv.Itoa(adminPort))
	ctx := context.Background()

	// ---- 1. The Setting catalog, the namespaces and the backend. ----------------------------
	for name, value := range kvv1.SettingCatalog() {
		require.NoError(t, c.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}))
	}
	for _, ns := range []string{systemNamespace, tenantNamespace} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	// The walkthrough's backend, except: no election (the PyPI wheel has no Kubernetes HA
	// backend compiled in, MOONCAKE_NOTES §7), a 256Mi segment and a 16Mi staging buffer to fit
	// this machine. multiTenancy is left to its default (on).
	backend := &kvv1.KVCacheBackend{
		ObjectMeta: metav1.ObjectMeta{Name: backendName},
		Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Leader: kvv1.Leader{ElectionBackend: kvv1.ElectionNone},
			Members: []kvv1.MemberGroup{{
				NodeSelector:      map[string]string{"kubernetes.io/os": "linux"},
				Medium:            kvv1.MediumDRAM,
				CapacityPerMember: resource.MustParse("256Mi"),
				LocalBufferSize:   ptr.To(resource.MustParse("16Mi")),
			}},
		}}},
	}
	require.NoError(t, c.Create(ctx, backend))

	// ---- 2. What the operator rendered. ------------------------------------------------------
	leaderDep := eventually(t, c, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: generator.LeaderName(backendName)}},
		settle, "the leader Deployment is created", func(*appsv1.Deployment) bool { return true })
	memberDS := eventually(t, c, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: generator.MemberName(backendName, 0)}},
		settle, "the member DaemonSet is created", func(*appsv1.DaemonSet) bool { return true })
	policyCM := eventually(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: generator.QuotaPolicyName(backendName)}},
		settle, "the tenant-quota-policy ConfigMap is created", func(*corev1.ConfigMap) bool { return true })
	assert.Equal(t, map[string]string{"tenant-quota-policy.yaml": "version: 1\ntenants: []\n"}, policyCM.Data,
		"no Binding yet: an empty ledger, in the only empty form the master accepts")

	lspec := leaderDep.Spec.Template.Spec
	require.Len(t, lspec.Containers, 1)
	leaderC := lspec.Containers[0]
	assert.Equal(t, "leader", leaderC.Name)
	assert.Equal(t, []string{"mooncake_master"}, leaderC.Command)
	require.Equal(t, renderedMasterArgs, leaderC.Args, "the leader's rendered flags")
	assert.Empty(t, leaderC.Env, "no election: no downward-API env")
	assert.Equal(t, []corev1.ContainerPort{{Name: "rpc", ContainerPort: 50051, Protocol: corev1.ProtocolTCP}, {Name: "admin", ContainerPort: 9003, Protocol: corev1.ProtocolTCP}}, leaderC.Ports)
	require.NotNil(t, leaderC.ReadinessProbe)
	require.NotNil(t, leaderC.ReadinessProbe.HTTPGet)
	assert.Equal(t, intstr.FromString("admin"), leaderC.ReadinessProbe.HTTPGet.Port)
	require.Len(t, lspec.InitContainers, 1, "multi-tenancy: the seed init container")

	mspec := memberDS.Spec.Template.Spec
	require.Len(t, mspec.Containers, 1)
	memberC := mspec.Containers[0]
	assert.Equal(t, "member", memberC.Name)
	assert.Equal(t, []string{"mc_store_rest_server"}, memberC.Command)
	require.Equal(t, []string{"--port=8080"}, memberC.Args, "the member's rendered args")
	require.Equal(t, renderedMemberEnv, memberC.Env, "the member's rendered env")
	assert.Equal(t, resource.MustParse("272Mi"), memberC.Resources.Requests[corev1.ResourceMemory], "DRAM: segment + staging buffer")
	require.NotNil(t, memberC.ReadinessProbe)
	require.NotNil(t, memberC.ReadinessProbe.TCPSocket)
	assert.Equal(t, intstr.FromString("rest"), memberC.ReadinessProbe.TCPSocket.Port)

	// The leader Pod as the kubelet would set it up: fresh volumes, the init container copies
	// the ConfigMap's tenant-quota-policy.yaml into the writable emptyDir; then the master with
	// EXACTLY the rendered flags, except the ports (free loopback ports instead of 50051/9003,
	// which a test machine may not have free), -metrics_host=127.0.0.1 appended (do not serve
	// the admin API beyond loopback), and the policy path resolved through the Pod's mounts.
	startLeader := func(what string) leaderRun {
		t.Helper()
		vols := setUpVolumes(t, c, systemNamespace, leaderDep.Spec.Template.ObjectMeta, lspec.Volumes)
		runInitContainer(t, vols, lspec.InitContainers[0])
		var args []string
		var policy string
		for _, a := range leaderC.Args {
			flag, value, _ := strings.Cut(a, "=")
			switch flag {
			case "-rpc_port":
				a = "-rpc_port=" + strconv.Itoa(rpcPort)
			case "-metrics_port":
				a = "-metrics_port=" + strconv.Itoa(adminPort)
			case "-tenant_quota_connector_uri":
				policy = vols.hostPath(t, leaderC.VolumeMounts, value)
				a = "-tenant_quota_connector_uri=" + policy
			}
			args = append(args, a)
		}
		args = append(args, "-metrics_host=127.0.0.1")
		require.Equal(t, []string{
			"-rpc_port=" + strconv.Itoa(rpcPort),
			"-metrics_port=" + strconv.Itoa(adminPort),
			"-default_kv_lease_ttl=5m",
			"-allocation_strategy=free_ratio_first",
			"-enable_multi_tenants=true",
			"-tenant_quota_connector_uri=" + policy,
			"-metrics_host=127.0.0.1",
		}, args)
		seed, err := os.ReadFile(policy)
		require.NoError(t, err, "the init container seeded the policy file")
		cm := &corev1.ConfigMap{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(policyCM), cm))
		require.Equal(t, cm.Data["tenant-quota-policy.yaml"], string(seed), "the seed is the ConfigMap's content")
		p := mooncaketest.Start(t, what, 3*time.Second, nil, filepath.Join(bin, leaderC.Command[0]), args...)
		return leaderRun{policy: policy, proc: p}
	}

	masterStart := time.Now()
	leader := startLeader("mooncake_master")
	// The kubelet's readiness probe, as rendered (GET /get_all_segments on the admin port),
	// against the real master; once it passes, the Deployment reports the leader rolled out.
	mooncaketest.Poll(t, 10*time.Second, "the leader's readiness probe", []*mooncaketest.Proc{leader.proc}, func() error {
		_, err := admin.get(leaderC.ReadinessProbe.HTTPGet.Path)
		return err
	})
	rollOutLeader(t, c, leaderDep)
	// The master parsed the rendered lease TTL as five minutes (Go's "5m0s" would abort it).
	assert.Contains(t, leader.proc.Output(), "default_kv_lease_ttl=300000")
	assert.Contains(t, leader.proc.Output(), "enable_ha=0")

	// ---- 3. The member Pod, as the DaemonSet controller and the kubelet would run it. ---------
	pod := scheduleMemberPod(t, c, memberDS, "node-0", "127.0.0.1")
	memberEnv := resolveEnv(t, memberC.Env, pod)
	for i, kv := range memberEnv {
		if strings.HasPrefix(kv, "MOONCAKE_MASTER=") {
			// The leader Service's DNS name stands for the leader Pod; here that is loopback.
			memberEnv[i] = "MOONCAKE_MASTER=" + rpcAddr
		}
	}
	// Bounded retries, so a member that cannot reach the master fails in seconds, not 90 s.
	memberEnv = append(memberEnv, "MC_STORE_CLIENT_SETUP_RETRIES=2")
	require.Equal(t, []string{
		"MOONCAKE_MASTER=" + rpcAddr,
		"MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE",
		"MOONCAKE_PROTOCOL=tcp",
		"MOONCAKE_LOCAL_HOSTNAME=127.0.0.1", // status.podIP
		"MOONCAKE_GLOBAL_SEGMENT_SIZE=268435456",
		"MOONCAKE_LOCAL_BUFFER_SIZE=16777216",
		"MC_TE_METRIC=1",
		"KVCACHE_MASTER_ADMIN=mooncake-dram-leader.gpustack-system.svc:9003", // read by the preStop drain only
		"KVCACHE_POD_IP=127.0.0.1",                                           // status.podIP
		"MC_RPC_CONNECT_TIMEOUT_MS=1000",                                     // the member's dial of the master, bounded
		"MC_STORE_CLIENT_SETUP_RETRIES=2",
	}, memberEnv)
	memberArgs := []string{"--port=" + strconv.Itoa(restPort)} // rendered --port=8080, on a free port
	memberStart := time.Now()
	member := mooncaketest.Start(t, "mc_store_rest_server", 6*time.Second, memberEnv, filepath.Join(bin, memberC.Command[0]), memberArgs...)
	// The kubelet's readiness probe, as rendered (TCP on the REST port), then Ready.
	mooncaketest.Poll(t, 15*time.Second, "the member's readiness probe", []*mooncaketest.Proc{leader.proc, member}, func() error {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(restPort), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	})
	markPodReady(t, c, pod)

	// ---- 4. The backend reads Ready, with the capacity and the member read from the store. --
	got := eventually(t, c, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}}, settle, "Ready",
		func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	startToReady, memberToReady := time.Since(masterStart), time.Since(memberStart)
	segs, err := admin.segments()
	require.NoError(t, err)
	require.Len(t, segs, 1, "the master lists the member's segment")
	assert.Regexp(t, regexp.MustCompile(`^127\.0\.0\.1:\d+$`), segs[0].Name, "segment named <MOONCAKE_LOCAL_HOSTNAME>:<port>")
	require.NotNil(t, got.Status.Capacity, "capacity is published once read from the store")
	assert.Equal(t, "256Mi", got.Status.Capacity.Total.String())
	assert.Equal(t, int64(segmentSize), got.Status.Capacity.Total.Value(), "the member's segment size, as the master reports it")
	assert.Equal(t, metav1.ConditionTrue, condition(got.Status.Conditions, kvv1.ConditionLeaderAvailable).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(got.Status.Conditions, kvv1.ConditionCapacityObserved).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(got.Status.Conditions, kvv1.ConditionRolloutComplete).Status)
	mounted := condition(got.Status.Conditions, kvv1.ConditionMembersMounted)
	assert.Equal(t, metav1.ConditionTrue, mounted.Status)
	assert.Equal(t, "all 1 member Pod(s) registered their segments", mounted.Message)
	require.Len(t, got.Status.Members, 1)
	assert.Equal(t, pod.Name, got.Status.Members[0].Pod, "the segment is joined to the member Pod by its IP")
	assert.Equal(t, "node-0", got.Status.Members[0].Node)
	assert.Equal(t, segs[0].Name, got.Status.Members[0].Segment)
	assert.Equal(t, "tcp", got.Status.Members[0].Protocol)
	assert.Equal(t, "OK", got.Status.Members[0].Status)
	assert.Equal(t, "256Mi", got.Status.Members[0].Capacity.String())
	assert.Equal(t, []kvv1.Endpoint{
		{Name: kvv1.EndpointClient, Address: "mooncake-dram-leader.gpustack-system.svc:50051"},
		{Name: kvv1.EndpointAdmin, Address: "mooncake-dram-leader.gpustack-system.svc:9003"},
	}, got.Status.Endpoints)

	out := kubectl(t, env, "get", "kvcb", backendName)
	t.Logf("kubectl get kvcb:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, []string{"NAME", "TYPE", "PHASE", "ENDPOINT", "CAPACITY", "AGE"}, strings.Fields(lines[0]))
	require.Len(t, strings.Fields(lines[1]), 6)
	assert.Equal(t, []string{backendName, "Mooncake", "Ready", "mooncake-dram-leader.gpustack-system.svc:50051", "256Mi"}, strings.Fields(lines[1])[:5])

	// ---- 5. A pool and a Binding: the operator registers the tenant in the real ledger. ------
	require.NoError(t, c.Create(ctx, &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: poolName}, Spec: kvv1.KVCachePoolSpec{
		Backends: []string{backendName}, Quota: kvv1.PoolQuota{Total: resource.MustParse("256Mi")}}}))
	require.NoError(t, c.Create(ctx, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: bindingName}, Spec: kvv1.KVCachePoolBindingSpec{
		PoolRef: kvv1.LocalReference{Name: poolName}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("128Mi")},
		Domain: kvv1.Domain{Name: domainName, BlockSize: 64, Dtype: "bfloat16"}}}))
	var entry ledgerEntry
	mooncaketest.Poll(t, settle, "the master's ledger lists "+domainName, []*mooncaketest.Proc{leader.proc, member}, func() error {
		l, err := admin.ledger()
		if err != nil {
			return err
		}
		e, ok := l[domainName]
		if !ok {
			return fmt.Errorf("ledger %+v", l)
		}
		entry = e
		return nil
	})
	assert.Equal(t, int64(ceilingBytes), entry.RequestedQuotaBytes, "registered with the Binding's ceiling")
	assert.Equal(t, int64(ceilingBytes), entry.EffectiveQuotaBytes, "128Mi of a 256Mi store: granted in full")
	bnd := eventually(t, c, &kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: bindingName}}, settle, "QuotaGranted",
		func(b *kvv1.KVCachePoolBinding) bool {
			return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted"
		})
	granted := condition(bnd.Status.Conditions, kvv1.ConditionQuotaGranted)
	assert.Equal(t, metav1.ConditionTrue, granted.Status)
	assert.Equal(t, "the store grants 128Mi of the requested 128Mi", granted.Message)
	require.NotNil(t, bnd.Status.EffectiveQuota)
	assert.Equal(t, int64(ceilingBytes), bnd.Status.EffectiveQuota.Value(), "the grant the store computed")
	assert.Equal(t, kvv1.PhaseReady, bnd.Status.Phase)
	pl := eventually(t, c, &kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: poolName}}, settle, "Ready",
		func(p *kvv1.KVCachePool) bool { return p.Status.Phase == kvv1.PhaseReady })
	assert.Equal(t, "mooncake-dram-leader.gpustack-system.svc:50051", pl.Status.ClientEndpoint)
	assert.Equal(t, metav1.ConditionTrue, condition(pl.Status.Conditions, kvv1.ConditionQuotaLedgerAvailable).Status)
	assert.Equal(t, metav1.ConditionTrue, condition(pl.Status.Conditions, kvv1.ConditionCapacityAllocatable).Status)
	// The master persisted the operator's PUT in its writable copy of the seed (the emptyDir):
	// with the ConfigMap mounted read-only it would have refused it (-1503 PERSISTENT_FAIL).
	persisted, err := os.ReadFile(leader.policy)
	require.NoError(t, err)
	assert.Contains(t, string(persisted), `name: "team-a-chat"`)
	// And the seed a new leader Pod would start from now carries the tenant.
	eventually(t, c, policyCM, settle, "the seed ConfigMap lists the tenant", func(cm *corev1.ConfigMap) bool {
		return cm.Data["tenant-quota-policy.yaml"] == seededPolicy
	})

	// ---- 6. Injection: an engine configured from the injected mooncake.json moves bytes. -----
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	vllm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantNamespace, Name: "vllm-0",
			Labels:      map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{vocab.AnnotationBinding: bindingName, vocab.AnnotationEngine: "vLLM"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.29.0",
			Command: []string{"vllm"}, Args: []string{"serve", "--model", "m"}}}},
	}
	// What the webhook does on Pod CREATE: the same injection function, resolving through the
	// API server (cached then live; both readers are the same client here).
	res, err := injection.New(r).Inject(ctx, vllm, tenantNamespace, objects.Cluster{Cached: c, Live: c})
	require.NoError(t, err)
	injected, err := res.Apply(vllm)
	require.NoError(t, err)
	require.True(t, res.Injected)
	assert.Equal(t, injection.Record{Binding: bindingName, Engine: "vllm", Vehicle: "file", Domain: domainName, TenantInjected: true, LaunchProgram: "vllm"}, res.Record)
	clientConfig := injected.Annotations[vocab.AnnotationClientConfig]
	require.JSONEq(t, `{"metadata_server":"P2PHANDSHAKE","master_server_address":"mooncake-dram-leader.gpustack-system.svc:50051",
		"protocol":"tcp","device_name":"","global_segment_size":0,"local_buffer_size":134217728,"tenant_id":"team-a-chat","mode":"standalone-store"}`, clientConfig)
	engineC := injected.Spec.Containers[0]
	assert.Equal(t, []string{"serve", "--model", "m", "--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}`, "--kv-cache-dtype", "bfloat16"}, engineC.Args)
	// The kubelet projects the annotation into the downward-API volume; the env names that file.
	engineVols := setUpVolumes(t, c, tenantNamespace, injected.ObjectMeta, injected.Spec.Volumes)
	var configPath string
	var engineEnv []string
	for _, kv := range resolveEnv(t, engineC.Env, injected) {
		if v, ok := strings.CutPrefix(kv, "MOONCAKE_CONFIG_PATH="); ok {
			assert.Equal(t, "/etc/gpustack/kvcache/mooncake.json", v)
			configPath = engineVols.hostPath(t, engineC.VolumeMounts, v)
			continue
		}
		engineEnv = append(engineEnv, kv)
	}
	require.NotEmpty(t, configPath, "the engine's env names the projected file")
	projected, err := os.ReadFile(configPath)
	require.NoError(t, err)
	require.Equal(t, clientConfig, string(projected))
	// Only two edits: the master's Service name is not resolvable here, and vLLM computes
	// local_hostname itself at start (the Python reader requires the key).
	writeClientConfig := func(path, tenant string) {
		var doc map[string]any
		dec := json.NewDecoder(strings.NewReader(clientConfig))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&doc))
		doc["master_server_address"] = rpcAddr
		doc["local_hostname"] = "127.0.0.1"
		if tenant != "" {
			doc["tenant_id"] = tenant
		}
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
	writeClientConfig(configPath, "")
	script, err := filepath.Abs(filepath.Join("testdata", "engine_client.py"))
	require.NoError(t, err)
	runClient := func(configFile, key string) clientResult {
		t.Helper()
		start := time.Now()
		stdout, stderr, err := mooncaketest.Run(t, 40*time.Second, append(append([]string(nil), engineEnv...),
			"MOONCAKE_CONFIG_PATH="+configFile, "E2E_KEY="+key, "E2E_PAYLOAD_BYTES="+strconv.Itoa(payloadBytes), "E2E_ADMIN_URL="+admin.base,
			// Bounded retries, so a client that cannot reach the master fails in seconds.
			"MC_STORE_CLIENT_SETUP_RETRIES=2", "PYTHONUNBUFFERED=1"), filepath.Join(bin, "python"), script)
		require.NoError(t, err, "engine client: stdout:\n%s\nstderr:\n%s", stdout, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		cr := clientResult{stderr: stderr}
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &cr), "engine client output:\n%s\nstderr:\n%s", stdout, stderr)
		t.Logf("engine client (%s) took %s: setup %d, put %d, got %d bytes", cr.SetupArgs.TenantID, time.Since(start).Round(time.Millisecond), cr.Setup, cr.Put, cr.GetLen)
		return cr
	}
	cr := runClient(configPath, "e2e-key")
	assert.Equal(t, 0, cr.Setup)
	assert.Equal(t, 0, cr.Put, "the put under the injected tenant succeeds")
	assert.True(t, cr.GetEqual, "the bytes come back")
	assert.Equal(t, payloadBytes, cr.GetLen)
	assert.Equal(t, setupArgs{
		LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE", GlobalSegmentSize: 0, LocalBufferSize: clientBufferLen,
		Protocol: "tcp", RDMADevices: "", MasterServerAddr: rpcAddr, TenantID: domainName,
	}, cr.SetupArgs, "the client ran with the injected values")
	// ... and the store library says so itself: it registered the injected staging buffer and,
	// with global_segment_size 0, mounted no segment of its own.
	assert.Contains(t, cr.stderr, "Registering local memory: 134217728 bytes")
	assert.Contains(t, cr.stderr, "Global segment size is 0, skip mounting segment")
	// global_segment_size 0: the engine mounted no segment of its own while connected; the
	// master still lists only the member's.
	require.Len(t, cr.SegmentsWhileConnected.Segments, 1)
	assert.Equal(t, segs[0].Name, cr.SegmentsWhileConnected.Segments[0].Name)
	// The bytes landed in the member's segment, charged to the tenant.
	l, err := admin.ledger()
	require.NoError(t, err)
	assert.Equal(t, int64(payloadBytes), l[domainName].ChargedBytes, "the tenant is charged for the put")
	segs, err = admin.segments()
	require.NoError(t, err)
	require.Len(t, segs, 1)
	assert.GreaterOrEqual(t, segs[0].UsedBytes, int64(payloadBytes), "the member's segment holds the bytes")
	// The operator reads the same figures back.
	eventually(t, c, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}}, settle, "capacity.used reflects the put",
		func(b *kvv1.KVCacheBackend) bool {
			return b.Status.Capacity != nil && b.Status.Capacity.Used != nil && b.Status.Capacity.Used.Value() >= payloadBytes
		})
	eventually(t, c, bnd, settle, "usage reflects the put", func(b *kvv1.KVCachePoolBinding) bool {
		return b.Status.Usage != nil && b.Status.Usage.Value() == payloadBytes
	})

	// The same file with a tenant nobody registered: the master refuses the write.
	stranger := filepath.Join(t.TempDir(), "mooncake.json")
	writeClientConfig(stranger, "not-registered")
	cr = runClient(stranger, "e2e-key")
	assert.Equal(t, 0, cr.Setup, "setup does not check the tenant")
	assert.Equal(t, -1701, cr.Put, "TENANT_NOT_REGISTERED")
	assert.Equal(t, 0, cr.GetLen, "and it does not see the registered tenant's key")

	// ---- 7. The master dies; a new leader Pod starts from the seed. --------------------------
	got = eventually(t, c, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}}, settle, "Ready", func(b *kvv1.KVCacheBackend) bool {
		return b.Status.Phase == kvv1.PhaseReady
	})
	require.Equal(t, &kvv1.LeaderStatus{Failover: kvv1.FailoverCold}, got.Status.Leader, "no cold cache reported while the first master ran")
	killedAt := time.Now()
	leader.proc.Kill()
	got = eventually(t, c, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}}, 30*time.Second, "Error with no capacity",
		func(b *kvv1.KVCacheBackend) bool {
			return (b.Status.Phase == kvv1.PhaseError || b.Status.Phase == kvv1.PhaseDegraded) && b.Status.Capacity == nil &&
				condition(b.Status.Conditions, kvv1.ConditionCapacityObserved).Reason == "LeaderUnavailable"
		})
	killToError := time.Since(killedAt)
	assert.Equal(t, kvv1.PhaseError, got.Status.Phase)
	assert.Nil(t, got.Status.Capacity, "absent, not zero")
	assert.Equal(t, metav1.ConditionFalse, condition(got.Status.Conditions, kvv1.ConditionLeaderAvailable).Status)
	assert.Equal(t, metav1.ConditionFalse, condition(got.Status.Conditions, kvv1.ConditionCapacityObserved).Status)
	assert.False(t, member.Exited(), "the member outlives the master")

	// A new leader Pod: new emptyDir, seeded by the init container from the ConfigMap as the
	// API server has it now (it lists the tenant, since the Binding exists). Same flags, same
	// ports.
	cm := &corev1.ConfigMap{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(policyCM), cm))
	require.Equal(t, seededPolicy, cm.Data["tenant-quota-policy.yaml"])
	restartedAt := time.Now()
	leader = startLeader("mooncake_master (restarted)")
	// Cleanups run last-registered first: stop the member while this master still runs (it
	// unmounts and exits; without a master it ignores SIGTERM until the grace period ends).
	t.Cleanup(member.Stop)
	got = eventually(t, c, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}}, settle, "Ready again",
		func(b *kvv1.KVCacheBackend) bool { return b.Status.Phase == kvv1.PhaseReady })
	restartToReady := time.Since(restartedAt)
	// The restart is told as a cold cache: the new process's counters started over.
	cold := eventually(t, c, &kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: backendName}}, settle, "a cold cache reported",
		func(b *kvv1.KVCacheBackend) bool {
			return b.Status.Leader != nil && b.Status.Leader.ColdCacheSince != nil
		}).Status.Leader
	restartToColdCache := time.Since(restartedAt)
	assert.Equal(t, kvv1.ColdCacheMasterRestarted, cold.ColdCacheReason)
	assert.False(t, cold.ColdCacheSince.Time.Before(restartedAt.Truncate(time.Second)), "cold since %s, the master restarted at %s", cold.ColdCacheSince, restartedAt)
	assert.WithinDuration(t, restartedAt, cold.ColdCacheSince.Time, settle)
	coldCacheEvent := fmt.Sprintf("the master answering at %s is a new process (its counters started over): it holds none of the objects cached before, so each of them misses (cold cache)",
		cold.ColdCacheSince.UTC().Format(time.RFC3339))
	require.Eventually(t, func() bool {
		l := &eventsv1.EventList{}
		require.NoError(t, c.List(ctx, l))
		for _, e := range l.Items {
			if e.Reason == "ColdCache" && e.Regarding.Name == backendName && e.Note == coldCacheEvent {
				return true
			}
		}
		return false
	}, settle, 100*time.Millisecond, "the ColdCache event: %s", coldCacheEvent)
	require.NotNil(t, got.Status.Capacity)
	assert.Equal(t, "256Mi", got.Status.Capacity.Total.String(), "the member re-registered by itself")
	assert.Equal(t, metav1.ConditionTrue, condition(got.Status.Conditions, kvv1.ConditionMembersMounted).Status)
	require.Len(t, got.Status.Members, 1)
	assert.Equal(t, pod.Name, got.Status.Members[0].Pod)
	mooncaketest.Poll(t, settle, "the restarted ledger holds "+domainName, []*mooncaketest.Proc{leader.proc, member}, func() error {
		l, err := admin.ledger()
		if err != nil {
			return err
		}
		if e := l[domainName]; e.RequestedQuotaBytes != ceilingBytes || e.EffectiveQuotaBytes != ceilingBytes {
			return fmt.Errorf("ledger %+v", l)
		}
		return nil
	})
	l, err = admin.ledger()
	require.NoError(t, err)
	assert.Zero(t, l[domainName].ChargedBytes, "a restarted master starts with a cold cache")
	eventually(t, c, bnd, settle, "Granted again", func(b *kvv1.KVCachePoolBinding) bool {
		return condition(b.Status.Conditions, kvv1.ConditionQuotaGranted).Reason == "Granted" &&
			b.Status.EffectiveQuota != nil && b.Status.EffectiveQuota.Value() == ceilingBytes
	})

	t.Logf("timings: master start -> backend Ready %s (member start -> Ready %s); master SIGKILL -> backend %s %s; master restart -> backend Ready %s, -> cold cache reported %s; whole test %s (before cleanup)",
		startToReady.Round(time.Millisecond), memberToReady.Round(time.Millisecond), kvv1.PhaseError, killToError.Round(time.Millisecond), restartToReady.Round(time.Millisecond),
		restartToColdCache.Round(time.Millisecond), time.Since(testStart).Round(time.Millisecond))
	// ---- 8. How a tenant is used, on a second master (an external backend). -----------------
	t.Run("TheTenantsUse", func(t *testing.T) { tenantsUse(t, env) })

	// ---- 9. Cleanup: t.Cleanup stops the member and the master (process groups, SIGKILL after
	// the grace period), then the manager, then envtest.
}

// clientResult is the engine client's JSON line (testdata/engine_client.py).
type clientResult struct {
	stderr string // the store library's log

	SetupArgs              setupArgs `json:"setup_args"`
	Setup                  int       `json:"setup"`
	Put                    int       `json:"put"`
	GetLen                 int       `json:"get_len"`
	GetEqual               bool      `json:"get_equal"`
	SegmentsWhileConnected struct {
		Segments []segment `json:"segments"`
	} `json:"segments_while_connected"`
	// More are the codes of the puts after the first (E2E_MORE).
	More []int `json:"more"`
}

// setupArgs is the dict the client passed to MooncakeDistributedStore.setup.
type setupArgs struct {
	LocalHostname     string `json:"local_hostname"`
	MetadataServer    string `json:"metadata_server"`
	GlobalSegmentSize int64  `json:"global_segment_size"`
	LocalBufferSize   int64  `json:"local_buffer_size"`
	Protocol          string `json:"protocol"`
	RDMADevices       string `json:"rdma_devices"`
	MasterServerAddr  string `json:"master_server_addr"`
	TenantID          string `json:"tenant_id"`
}
