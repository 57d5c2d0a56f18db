package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	rpcPort     = 50051
	adminPort   = 9003
	segmentSize = 64 << 20
	tenant      = "team-a"
	// The annotation the vLLM fragment projects into the engine's mooncake.json.
	clientConfigAnnotation = "kvcache.gpustack.ai/client-config"
	configDir              = "/etc/gpustack/kvcache"
)

func TestNodesAreReady(t *testing.T) {
	ctx := context.Background()
	nodes, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, len(env.sockets), "one node per containerd that hack/cluster.sh sockets lists")
	for _, n := range nodes.Items {
		assert.Equal(t, corev1.ConditionTrue, nodeCondition(n, corev1.NodeReady), "node %s Ready", n.Name)
	}
}

// TestStoreAndEngines assembles a Mooncake store the way the operator's templates do (a master
// behind a ClusterIP Service, one member per node pointed at the Service's DNS name, the member's
// hostname from status.podIP), then runs the stand-in engines against it with the client
// configuration injection writes.
func TestStoreAndEngines(t *testing.T) {
	ctx := context.Background()
	ns := env.namespace
	nodes := len(env.sockets)
	master := fmt.Sprintf("kvstore-master.%s.svc.cluster.local:%d", ns, rpcPort)

	startMaster(t, ctx)
	startMembers(t, ctx, master)

	t.Run("every member registered its segment under its Pod IP", func(t *testing.T) {
		var metrics, segments string
		err := poll(ctx, time.Minute, func() (bool, error) {
			metrics = adminGet(ctx, "/metrics")
			return metricValue(metrics, "master_total_capacity_bytes") == float64(nodes*segmentSize), nil
		})
		require.NoError(t, err, "master_total_capacity_bytes should reach %d (%d members x %d); metrics:\n%s",
			nodes*segmentSize, nodes, segmentSize, grepLines(metrics, "capacity"))
		segments = adminGet(ctx, "/get_all_segments")
		pods := podsWithLabel(t, ctx, "app=kvstore-member")
		require.Len(t, pods, nodes)
		for _, p := range pods {
			assert.Contains(t, segments, p.Status.PodIP+":", "segment of member %s (on %s)", p.Name, p.Spec.NodeName)
		}
	})

	t.Run("vLLM stand-in puts and reads back bytes with the projected mooncake.json", func(t *testing.T) {
		cfg := map[string]any{
			"metadata_server": "P2PHANDSHAKE", "master_server_address": master, "protocol": "tcp",
			"device_name": "", "global_segment_size": 0, "local_buffer_size": 16 << 20,
			"tenant_id": tenant, "mode": "standalone-store",
		}
		raw, err := json.Marshal(cfg)
		require.NoError(t, err)
		pod := vllmPod("engine-vllm", string(raw), true)
		line := runEngine(t, ctx, pod, 8000)
		assert.Equal(t, "vllm", line["engine"])
		assert.Equal(t, true, line["ok"], "outcome: %v", line)
		assert.EqualValues(t, 0, line["put"])
		assert.Equal(t, true, line["get_equal"])
		assert.Equal(t, tenant, line["tenant"])
		assert.Equal(t, master, line["master"])
		assert.Equal(t, "standalone-store", line["mode"])
		assert.Equal(t, "MOONCAKE_CONFIG_PATH="+configDir+"/mooncake.json", line["config_source"])
		assert.Equal(t, podIP(t, ctx, pod.Name), line["local_hostname"], "vLLM registers the address it reaches the master from")

		// The master charged the tenant for what the engine wrote.
		err = poll(ctx, 30*time.Second, func() (bool, error) {
			return metricValue(adminGet(ctx, "/metrics"), `mooncake_tenant_quota_charged_bytes{tenant_id="`+tenant+`"}`) > 0, nil
		})
		assert.NoError(t, err, "the master should charge %s for the engine's puts", tenant)
	})

	t.Run("SGLang stand-in puts and reads back bytes with the injected environment", func(t *testing.T) {
		pod := sglangPod("engine-sglang", master)
		line := runEngine(t, ctx, pod, 30000)
		assert.Equal(t, "sglang", line["engine"])
		assert.Equal(t, true, line["ok"], "outcome: %v", line)
		assert.Equal(t, true, line["get_equal"])
		assert.Equal(t, tenant, line["tenant"])
		assert.Equal(t, "environment", line["config_source"])
		assert.Equal(t, podIP(t, ctx, pod.Name), line["local_hostname"], "MOONCAKE_LOCAL_HOSTNAME comes from status.podIP")
	})

	t.Run("vLLM stand-in without MOONCAKE_CONFIG_PATH exits non-zero naming it", func(t *testing.T) {
		pod := vllmPod("engine-vllm-unconfigured", "{}", false)
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		create(t, ctx, pod)
		done := waitPodDone(t, ctx, pod.Name)
		require.Equal(t, corev1.PodFailed, done.Status.Phase)
		term := done.Status.ContainerStatuses[0].State.Terminated
		require.NotNil(t, term)
		assert.NotZero(t, term.ExitCode)
		assert.Contains(t, logs(t, ctx, pod.Name, "engine"), "MOONCAKE_CONFIG_PATH is not set")
	})
}

// TestOperatorImage runs the operator image the way the chart does (command `kvcache`, found on
// the image's PATH) under runAsNonRoot, which the kubelet enforces against the image's user.
func TestOperatorImage(t *testing.T) {
	ctx := context.Background()
	want := chartAppVersion(t)
	nonRoot := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "operator-version", Namespace: env.namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot},
			Containers: []corev1.Container{{
				Name: "kvcache", Image: env.images["operator"], ImagePullPolicy: corev1.PullNever,
				Command: []string{"kvcache"}, Args: []string{"version"},
			}},
		},
	}
	create(t, ctx, pod)
	done := waitPodDone(t, ctx, pod.Name)
	out := logs(t, ctx, pod.Name, "kvcache")
	require.Equal(t, corev1.PodSucceeded, done.Status.Phase, "kvcache version: %s", out)
	assert.Equal(t, want, strings.TrimSpace(out), "kvcache version prints the chart's appVersion")

	t.Run("has no shell", func(t *testing.T) {
		shell := pod.DeepCopy()
		shell.Name, shell.ResourceVersion = "operator-shell", ""
		shell.Spec.Containers[0].Command, shell.Spec.Containers[0].Args = []string{"/bin/sh", "-c", "true"}, nil
		create(t, ctx, shell)
		var msg string
		err := poll(ctx, time.Minute, func() (bool, error) {
			p, err := env.client.CoreV1().Pods(env.namespace).Get(ctx, shell.Name, metav1.GetOptions{})
			if err != nil || len(p.Status.ContainerStatuses) == 0 {
				return false, err
			}
			s := p.Status.ContainerStatuses[0].State
			switch {
			case s.Terminated != nil:
				msg = fmt.Sprintf("terminated %d %s: %s", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
				return true, nil
			case s.Waiting != nil && s.Waiting.Message != "":
				msg = "waiting " + s.Waiting.Reason + ": " + s.Waiting.Message
				return true, nil
			}
			return false, nil
		})
		require.NoError(t, err)
		assert.Contains(t, msg, "/bin/sh", "starting /bin/sh fails: %s", msg)
		assert.NotContains(t, msg, "terminated 0 ", "no shell ran: %s", msg)
	})
}

func startMaster(t *testing.T, ctx context.Context) {
	t.Helper()
	ns := env.namespace
	policy := fmt.Sprintf("version: 1\ntenants:\n  - name: %s\n    quota: 256MB\n", tenant)
	create(t, ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kvstore-policy", Namespace: ns},
		Data:       map[string]string{"quota.yaml": policy},
	})
	labels := map[string]string{"app": "kvstore-master"}
	create(t, ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kvstore-master", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: labels,
			Ports: []corev1.ServicePort{
				{Name: "rpc", Port: rpcPort, TargetPort: intstr.FromString("rpc")},
				{Name: "admin", Port: adminPort, TargetPort: intstr.FromString("admin")},
			},
		},
	})
	// As the leader template does: the seed policy is copied (by `cp` from the image) into a
	// writable directory, since the master rewrites it.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kvstore-master", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Name: "seed", Image: env.images["store"], ImagePullPolicy: corev1.PullNever,
				Command:      []string{"cp", "/etc/mooncake/seed/quota.yaml", "/var/lib/mooncake/quota.yaml"},
				VolumeMounts: []corev1.VolumeMount{{Name: "seed", MountPath: "/etc/mooncake/seed", ReadOnly: true}, {Name: "policy", MountPath: "/var/lib/mooncake"}},
			}},
			Containers: []corev1.Container{{
				Name: "master", Image: env.images["store"], ImagePullPolicy: corev1.PullNever,
				Command: []string{"mooncake_master"},
				Args: []string{
					fmt.Sprintf("-rpc_port=%d", rpcPort), fmt.Sprintf("-metrics_port=%d", adminPort),
					"-enable_multi_tenants=true", "-tenant_quota_connector_uri=/var/lib/mooncake/quota.yaml",
				},
				Ports: []corev1.ContainerPort{{Name: "rpc", ContainerPort: rpcPort}, {Name: "admin", ContainerPort: adminPort}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("admin")}},
					PeriodSeconds: 1,
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "policy", MountPath: "/var/lib/mooncake"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "policy", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "seed", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kvstore-policy"}}}},
			},
		},
	}
	create(t, ctx, pod)
	waitPodReady(t, ctx, pod.Name)
}

// startMembers runs one member per node (a DaemonSet, as the templates render), each addressing
// the master by the Service's DNS name.
func startMembers(t *testing.T, ctx context.Context, master string) {
	t.Helper()
	labels := map[string]string{"app": "kvstore-member"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kvstore-member", Namespace: env.namespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "member", Image: env.images["store"], ImagePullPolicy: corev1.PullNever,
					Command: []string{"mc_store_rest_server"}, Args: []string{"--port", "8080"},
					Env: []corev1.EnvVar{
						{Name: "MOONCAKE_MASTER", Value: master},
						{Name: "MOONCAKE_LOCAL_HOSTNAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
						{Name: "MOONCAKE_TE_META_DATA_SERVER", Value: "P2PHANDSHAKE"},
						{Name: "MOONCAKE_PROTOCOL", Value: "tcp"},
						{Name: "MOONCAKE_GLOBAL_SEGMENT_SIZE", Value: strconv.Itoa(segmentSize)},
						{Name: "MOONCAKE_LOCAL_BUFFER_SIZE", Value: strconv.Itoa(16 << 20)},
						{Name: "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", Value: "true"},
						{Name: "MOONCAKE_CLIENT_HTTP_PORT", Value: "9300"},
					},
					Ports: []corev1.ContainerPort{{Name: "rest", ContainerPort: 8080}, {Name: "client-http", ContainerPort: 9300}},
					// The client HTTP server's /health answers 200 only while the master is reachable.
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromString("client-http")}},
						PeriodSeconds: 1,
					},
				}}},
			},
		},
	}
	create(t, ctx, ds)
	want := int32(len(env.sockets))
	var got *appsv1.DaemonSet
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		var err error
		got, err = env.client.AppsV1().DaemonSets(env.namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		return err == nil && got.Status.DesiredNumberScheduled == want && got.Status.NumberReady == want, err
	})
	if err != nil {
		require.NoError(t, err, "members Ready on every node: %+v\n%s", got, describePods(ctx, "app=kvstore-member"))
	}
}

func vllmPod(name, clientConfig string, configured bool) *corev1.Pod {
	c := corev1.Container{
		Name: "engine", Image: env.images["engine"], ImagePullPolicy: corev1.PullNever,
		Command: []string{"vllm"},
		Args: []string{"serve", "m", "--port", "8000",
			"--kv-transfer-config", `{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}`,
			"--kv-cache-dtype", "bfloat16"},
		Env: []corev1.EnvVar{{Name: "KVCACHE_STANDIN_PERIOD", Value: "2"}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.namespace,
			Annotations: map[string]string{clientConfigAnnotation: clientConfig}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}},
	}
	if configured {
		// As the vLLM fragment injects it: the annotation projected into a file.
		pod.Spec.Volumes = []corev1.Volume{{Name: "kvcache-config", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "mooncake.json", FieldRef: &corev1.ObjectFieldSelector{
				APIVersion: "v1", FieldPath: "metadata.annotations['" + clientConfigAnnotation + "']"}}},
		}}}}
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = []corev1.VolumeMount{{Name: "kvcache-config", MountPath: configDir, ReadOnly: true}}
		c.Env = append(c.Env, corev1.EnvVar{Name: "MOONCAKE_CONFIG_PATH", Value: configDir + "/mooncake.json"})
		c.ReadinessProbe = healthProbe(8000)
	}
	return pod
}

func sglangPod(name, master string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "engine", Image: env.images["engine"], ImagePullPolicy: corev1.PullNever,
			Command: []string{"python3", "-m", "sglang.launch_server"},
			Args: []string{"--model-path", "m", "--host", "0.0.0.0", "--port", "30000",
				"--hicache-storage-backend", "mooncake", "--kv-cache-dtype", "bf16", "--enable-hierarchical-cache"},
			// As the SGLang fragment injects them.
			Env: []corev1.EnvVar{
				{Name: "MOONCAKE_TENANT_ID", Value: tenant},
				{Name: "MOONCAKE_MASTER", Value: master},
				{Name: "MOONCAKE_TE_META_DATA_SERVER", Value: "P2PHANDSHAKE"},
				{Name: "MOONCAKE_PROTOCOL", Value: "tcp"},
				{Name: "MOONCAKE_DEVICE", Value: ""},
				{Name: "MOONCAKE_GLOBAL_SEGMENT_SIZE", Value: "0"},
				{Name: "MOONCAKE_LOCAL_HOSTNAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
				{Name: "KVCACHE_STANDIN_PERIOD", Value: "2"},
			},
			ReadinessProbe: healthProbe(30000),
		}}},
	}
}

func healthProbe(port int) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt(port)}},
		PeriodSeconds: 1,
	}
}

// runEngine starts an engine Pod, waits until its /health says a put and get succeeded, and
// returns the first JSON line it printed.
func runEngine(t *testing.T, ctx context.Context, pod *corev1.Pod, port int) map[string]any {
	t.Helper()
	create(t, ctx, pod)
	waitPodReady(t, ctx, pod.Name)
	out := logs(t, ctx, pod.Name, "engine")
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			return line
		}
	}
	require.FailNow(t, "no JSON line in the engine's log", "log of %s (port %d):\n%s", pod.Name, port, out)
	return nil
}

// ---------------------------------------------------------------------------------------------

func create[T interface {
	*corev1.Pod | *corev1.Service | *corev1.ConfigMap | *appsv1.DaemonSet
}](t *testing.T, ctx context.Context, obj T) {
	t.Helper()
	var err error
	switch o := any(obj).(type) {
	case *corev1.Pod:
		_, err = env.client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = env.client.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ConfigMap:
		_, err = env.client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.DaemonSet:
		_, err = env.client.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	}
	require.NoError(t, err)
}

func waitPodReady(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var p *corev1.Pod
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		var err error
		p, err = env.client.CoreV1().Pods(env.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s ended %s", name, p.Status.Phase)
		}
		return podCondition(p, corev1.PodReady), nil
	})
	if err != nil {
		require.NoError(t, err, "pod %s Ready:\n%s", name, describePod(ctx, p))
	}
}

func waitPodDone(t *testing.T, ctx context.Context, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		var err error
		p, err = env.client.CoreV1().Pods(env.namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed), err
	})
	if err != nil {
		require.NoError(t, err, "pod %s to finish:\n%s", name, describePod(ctx, p))
	}
	return p
}

func podIP(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	p, err := env.client.CoreV1().Pods(env.namespace).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, p.Status.PodIP)
	return p.Status.PodIP
}

func podsWithLabel(t *testing.T, ctx context.Context, selector string) []corev1.Pod {
	t.Helper()
	l, err := env.client.CoreV1().Pods(env.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	return l.Items
}

func logs(t *testing.T, ctx context.Context, pod, container string) string {
	t.Helper()
	b, err := env.client.CoreV1().Pods(env.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	require.NoError(t, err, "logs of %s/%s", pod, container)
	return string(b)
}

// adminGet reads the master's admin API through the API server's Service proxy.
func adminGet(ctx context.Context, path string) string {
	b, err := env.client.CoreV1().Services(env.namespace).ProxyGet("http", "kvstore-master", "admin", path, nil).DoRaw(ctx)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// metricValue is the value of the Prometheus sample named exactly series (labels included),
// or -1 when it is absent.
func metricValue(metrics, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([-+0-9.eE]+)$`)
	m := re.FindStringSubmatch(metrics)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func nodeCondition(n corev1.Node, c corev1.NodeConditionType) corev1.ConditionStatus {
	for _, cond := range n.Status.Conditions {
		if cond.Type == c {
			return cond.Status
		}
	}
	return corev1.ConditionUnknown
}

func podCondition(p *corev1.Pod, c corev1.PodConditionType) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == c {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describePod is what a failure message needs: phase, container states and the log tail.
func describePod(ctx context.Context, p *corev1.Pod) string {
	if p == nil {
		return "(pod not found)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s on %s: phase %s\n", p.Name, p.Spec.NodeName, p.Status.Phase)
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		st, _ := json.Marshal(s.State)
		fmt.Fprintf(&b, "  %s: ready=%v restarts=%d %s\n", s.Name, s.Ready, s.RestartCount, st)
		if out, err := env.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: s.Name, TailLines: ptr(int64(15))}).DoRaw(ctx); err == nil {
			fmt.Fprintf(&b, "  log tail:\n%s\n", out)
		}
	}
	return b.String()
}

func describePods(ctx context.Context, selector string) string {
	l, err := env.client.CoreV1().Pods(env.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range l.Items {
		b.WriteString(describePod(ctx, &l.Items[i]))
	}
	return b.String()
}

func ptr[T any](v T) *T { return &v }

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.repo, "charts", "kvcache-operator", "Chart.yaml"))
	require.NoError(t, err)
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	require.NoError(t, yaml.Unmarshal(b, &chart))
	require.NotEmpty(t, chart.AppVersion)
	return chart.AppVersion
}
