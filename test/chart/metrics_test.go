package chart_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metricsql"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/manager"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/store/storetest"
	"github.com/kvcache-operator/kvcache/vocab"
)

// query is one PromQL expression the chart ships, and where.
type query struct{ where, expr string }

// monitoringQueries renders the chart with the dashboard and the alerts on and returns every
// query in them: each dashboard target, each templating variable's label_values selector (with
// Grafana's variables replaced as Grafana would), and each alert's expression.
func monitoringQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	var dashboards, rules int
	for _, doc := range strings.Split(template(t, "--set", "metrics.dashboard.enabled=true", "--set", "metrics.prometheusRule.enabled=true"), "\n---\n") {
		switch {
		case strings.Contains(doc, "\nkind: ConfigMap\n") && strings.Contains(doc, "grafana_dashboard:"):
			dashboards++
			var cm corev1.ConfigMap
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &cm))
			assert.Equal(t, "1", cm.Labels["grafana_dashboard"], "the label Grafana's dashboard sidecar selects")
			require.Contains(t, cm.Data, "kvcache-operator.json")
			out = append(out, dashboardQueries(t, cm.Data["kvcache-operator.json"])...)
		case strings.Contains(doc, "\nkind: PrometheusRule\n"):
			rules++
			var pr struct {
				Spec struct {
					Groups []struct {
						Name  string `json:"name"`
						Rules []struct {
							Alert       string            `json:"alert"`
							Expr        string            `json:"expr"`
							For         string            `json:"for"`
							Labels      map[string]string `json:"labels"`
							Annotations map[string]string `json:"annotations"`
						} `json:"rules"`
					} `json:"groups"`
				} `json:"spec"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &pr))
			seen := map[string]bool{}
			for _, g := range pr.Spec.Groups {
				for _, r := range g.Rules {
					assert.False(t, seen[r.Alert], "alert %s twice", r.Alert)
					seen[r.Alert] = true
					_, err := model.ParseDuration(r.For)
					assert.NoError(t, err, "alert %s: for %q", r.Alert, r.For)
					assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "alert %s", r.Alert)
					assert.NotEmpty(t, r.Annotations["summary"], "alert %s", r.Alert)
					assert.NotEmpty(t, r.Annotations["description"], "alert %s", r.Alert)
					out = append(out, query{"alert " + r.Alert, r.Expr})
				}
			}
			for _, a := range []string{"KVCacheStoreUnreachable", "KVCacheMembersMissing", "KVCacheObjectsLost", "KVCacheColdFailover",
				"KVCacheNetworkPolicyNotEnforced", "KVCacheNotInUse", "KVCacheNotReadBack", "KVCacheEvictingAtGrant", "KVCacheAdmissionRefusalsSpiking", "KVCacheOperatorNoLeader"} {
				assert.True(t, seen[a], "the chart alerts with %s", a)
			}
		}
	}
	require.Equal(t, 1, dashboards, "metrics.dashboard.enabled renders the dashboard's ConfigMap")
	require.Equal(t, 1, rules, "metrics.prometheusRule.enabled renders the PrometheusRule")
	for _, off := range strings.Split(template(t), "\n---\n") {
		assert.NotContains(t, off, "grafana_dashboard:", "off by default")
		assert.NotContains(t, off, "kind: PrometheusRule", "off by default")
	}
	return out
}

// grafanaVars are the dashboard's variables as Grafana substitutes them into a query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "${backend}", ".*", "$backend", ".*", "${namespace}", ".*", "$namespace", ".*")

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

func dashboardQueries(t *testing.T, raw string) []query {
	t.Helper()
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &d), "the dashboard is JSON")
	require.NotEmpty(t, d.UID)
	var out []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		require.NotNil(t, m, "variable %s: %q is label_values(<selector>, <label>)", v.Name, v.Definition)
		out = append(out, query{"dashboard variable " + v.Name, m[1]})
	}
	graphs := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has a query", p.Title)
		for _, tg := range p.Targets {
			graphs++
			out = append(out, query{"dashboard panel " + strconv.Quote(p.Title), grafanaVars.Replace(tg.Expr)})
		}
	}
	require.NotZero(t, graphs)
	return out
}

// promqlFunctions are PromQL's functions and aggregations: metricsql parses a superset
// (MetricsQL), so anything else is refused here.
var promqlFunctions = map[string]bool{
	"abs": true, "absent": true, "absent_over_time": true, "avg": true, "avg_over_time": true, "bottomk": true, "ceil": true,
	"changes": true, "clamp": true, "clamp_max": true, "clamp_min": true, "count": true, "count_over_time": true, "count_values": true,
	"delta": true, "deriv": true, "exp": true, "floor": true, "group": true, "histogram_quantile": true, "idelta": true, "increase": true,
	"irate": true, "label_join": true, "label_replace": true, "last_over_time": true, "max": true, "max_over_time": true, "min": true,
	"min_over_time": true, "predict_linear": true, "quantile": true, "quantile_over_time": true, "rate": true, "resets": true, "round": true,
	"scalar": true, "sort": true, "sort_desc": true, "stddev": true, "stdvar": true, "sum": true, "sum_over_time": true, "time": true,
	"timestamp": true, "topk": true, "vector": true,
}

// rangeFunctions take a range vector in PromQL (MetricsQL would accept a bare selector).
var rangeFunctions = map[string]bool{"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true, "deriv": true,
	"changes": true, "resets": true, "absent_over_time": true, "avg_over_time": true, "count_over_time": true, "last_over_time": true,
	"max_over_time": true, "min_over_time": true, "quantile_over_time": true, "sum_over_time": true, "predict_linear": true}

// seriesNamed parses q as PromQL and returns the metric names it selects.
func seriesNamed(t *testing.T, q query) []string {
	t.Helper()
	e, err := metricsql.Parse(q.expr)
	require.NoError(t, err, "%s: %s", q.where, q.expr)
	var names []string
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		switch v := x.(type) {
		case *metricsql.MetricExpr:
			for _, group := range v.LabelFilterss {
				for _, f := range group {
					if f.Label == "__name__" && !f.IsRegexp && !f.IsNegative {
						names = append(names, f.Value)
					}
				}
			}
		case *metricsql.FuncExpr:
			assert.True(t, promqlFunctions[v.Name], "%s: %s is not a PromQL function", q.where, v.Name)
			if rangeFunctions[v.Name] {
				r, ok := v.Args[0].(*metricsql.RollupExpr)
				assert.True(t, ok && r.Window != nil, "%s: %s takes a range vector in PromQL", q.where, v.Name)
			}
		case *metricsql.AggrFuncExpr:
			assert.True(t, promqlFunctions[v.Name], "%s: %s is not a PromQL aggregation", q.where, v.Name)
		}
	})
	require.NotEmpty(t, names, "%s selects no series: %s", q.where, q.expr)
	return names
}

// The dashboard's and the alerts' PromQL parses, uses PromQL alone, and names only series the
// manager exports: the manager (webhooks and controllers, elected) runs against a real API
// server and a fake store, admits and refuses Pods, reconciles a backend, a pool and a Binding
// with a Pod, and its /metrics endpoint is scraped. Every kvcache_ series it exports is graphed.
func TestDashboardAndAlertsNameOnlyExportedSeries(t *testing.T) {
	queries := monitoringQueries(t)
	exported := scrapeManager(t)
	var names []string
	for n := range exported {
		names = append(names, n)
	}
	sort.Strings(names)
	graphed := map[string]bool{}
	for _, q := range queries {
		for _, n := range seriesNamed(t, q) {
			assert.True(t, exported[n], "%s names %s, which the manager does not export (it exports %v)", q.where, n, names)
			if strings.HasPrefix(q.where, "dashboard") {
				graphed[n] = true
			}
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, "kvcache_") && !strings.HasSuffix(n, "_sum") && !strings.HasSuffix(n, "_count") &&
			(!strings.HasSuffix(n, "_bucket") || exported[strings.TrimSuffix(n, "_bucket")+"_sum"]) {
			base := strings.TrimSuffix(n, "_bucket")
			assert.True(t, graphed[n] || graphed[base+"_bucket"], "the dashboard graphs %s", n)
		}
	}
}

// scrapeManager runs the manager and returns the names of the series its metrics endpoint
// serves (a histogram's as its _bucket, _sum and _count series).
func scrapeManager(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	r, err := generator.NewRenderer()
	require.NoError(t, err)
	objs, err := r.RenderWebhookConfigurations(generator.WebhookInput{Name: "kvcache-operator", Namespace: namespace, Service: "kvcache-operator-webhook"})
	require.NoError(t, err)
	hooks := testenv.WebhookInstallOptions(objs)
	env := testenv.StartForTest(t, "the metrics the manager exports", func(e *envtest.Environment) { e.WebhookInstallOptions = hooks })
	c := env.Client
	for _, ns := range []string{namespace, "gpustack-system", "team-a"} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	fake := storetest.NewFake(storetest.FakeOptions{MultiTenancy: true})
	t.Cleanup(fake.Close)
	fake.MountSegment("10.30.0.10:15400", 1<<30, "tcp")
	installed := env.Environment().WebhookInstallOptions
	metricsPort := freePort(t)
	mgr, err := manager.New(env.Config, manager.Options{
		SystemNamespace: "gpustack-system", LeaderElect: true,
		WebhookHost: installed.LocalServingHost, WebhookPort: installed.LocalServingPort, CertDir: installed.LocalServingCertDir,
		MetricsBindAddress: "127.0.0.1:" + strconv.Itoa(metricsPort), HealthProbeBindAddress: "0",
		AdminAddress: func(b *kvv1.KVCacheBackend) string {
			if b.Name == "unreachable" {
				return "127.0.0.1:1"
			}
			return strings.TrimPrefix(fake.URL(), "http://")
		},
		PollInterval: 300 * time.Millisecond, CacheInUseWindow: time.Second, EngineScrapeInterval: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	addr := net.JoinHostPort(installed.LocalServingHost, strconv.Itoa(installed.LocalServingPort))
	require.Eventually(t, func() bool {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe of a local test server
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the webhook server serves")
	// The chart's Setting catalog, admitted by the webhook that validates Settings.
	for name, value := range kvv1.SettingCatalog() {
		require.NoError(t, c.Create(ctx, &kvv1.Setting{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.SettingSpec{Value: value}}))
	}

	// A managed store with one member Pod, a pool, a Binding with an injected Pod; a backend
	// whose store does not answer.
	members := []kvv1.MemberGroup{{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, CapacityPerMember: resource.MustParse("1Gi")}}
	for _, o := range []client.Object{
		&kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "dram"}, Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Leader: kvv1.Leader{ElectionBackend: kvv1.ElectionNone}, Members: members}}}},
		&kvv1.KVCacheBackend{ObjectMeta: metav1.ObjectMeta{Name: "unreachable"}, Spec: kvv1.KVCacheBackendSpec{Connection: kvv1.Connection{Managed: &kvv1.ManagedConnection{
			Leader: kvv1.Leader{ElectionBackend: kvv1.ElectionNone}, Members: members}}}},
		&kvv1.KVCachePool{ObjectMeta: metav1.ObjectMeta{Name: "dram"}, Spec: kvv1.KVCachePoolSpec{Backends: []string{"dram"}, Quota: kvv1.PoolQuota{Total: resource.MustParse("1Gi")}}},
		&kvv1.KVCachePoolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "chat"}, Spec: kvv1.KVCachePoolBindingSpec{
			PoolRef: kvv1.LocalReference{Name: "dram"}, Quota: kvv1.BindingQuota{Ceiling: resource.MustParse("512Mi")},
			Domain: kvv1.Domain{Name: "team-a-chat", BlockSize: 64, Dtype: "bfloat16"}}},
	} {
		require.NoError(t, c.Create(ctx, o), "%T %s", o, o.GetName())
	}
	ds := &appsv1.DaemonSet{}
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: "gpustack-system", Name: generator.MemberName("dram", 0)}, ds) == nil
	}, 30*time.Second, 100*time.Millisecond, "the member DaemonSet")
	member := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "gpustack-system", Name: "dram-member-0-node-0", Labels: ds.Spec.Template.Labels}, Spec: *ds.Spec.Template.Spec.DeepCopy()}
	require.NoError(t, c.Create(ctx, member))
	member.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.30.0.10", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, c.Status().Update(ctx, member))
	require.Eventually(t, func() bool {
		b := &kvv1.KVCachePoolBinding{}
		return c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "chat"}, b) == nil && b.Status.Phase == kvv1.PhaseReady
	}, 30*time.Second, 100*time.Millisecond, "the Binding is granted")
	// The injected Pod's engine: its /metrics (on the port of its launch line) counts prompt
	// tokens and the store's share of them, as vLLM's does.
	var served atomic.Int64
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := served.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"m\"} %d\n# TYPE vllm:external_prefix_cache_hits_total counter\nvllm:external_prefix_cache_hits_total{model_name=\"m\"} %d\n", 1500*n, 1408*n)
	}))
	t.Cleanup(engine.Close)
	enginePort := strconv.Itoa(engine.Listener.Addr().(*net.TCPAddr).Port)
	// Through the webhook: one Pod injected, one refused.
	pod := func(name, binding string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{vocab.LabelInject: "true"},
			Annotations: map[string]string{vocab.AnnotationBinding: binding, vocab.AnnotationEngine: "vLLM"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.29.0", Command: []string{"vllm"}, Args: []string{"serve", "--model", "m", "--port", enginePort}}}}}
	}
	// The webhook refuses, saying to retry, until the pool has published its store address.
	require.Eventually(t, func() bool {
		p := &kvv1.KVCachePool{}
		return c.Get(ctx, client.ObjectKey{Name: "dram"}, p) == nil && p.Status.ClientEndpoint != ""
	}, 30*time.Second, 100*time.Millisecond, "the pool's client endpoint")
	injected := pod("vllm-0", "chat")
	deadline := time.Now().Add(10 * time.Second)
	for err := c.Create(ctx, injected.DeepCopy()); err != nil; err = c.Create(ctx, injected.DeepCopy()) {
		require.True(t, time.Now().Before(deadline), "the labelled Pod admitted within 10 s: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(injected), injected))
	require.Error(t, c.Create(ctx, pod("vllm-1", "no-such-binding")), "refused")
	injected.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "vllm", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	require.NoError(t, c.Status().Update(ctx, injected))
	fake.Evict("team-a-chat", 4096)

	want := []string{"kvcache_store_up", "kvcache_backend_capacity_bytes", "kvcache_backend_members_expected", "kvcache_binding_cache_in_use",
		"kvcache_binding_evicted_bytes_total", "kvcache_admission_total", "kvcache_store_scrape_failures_total", "kvcache_ledger_writes_total",
		"kvcache_binding_engine_prompt_tokens", "kvcache_binding_engine_store_tokens", "kvcache_binding_store_hit_ratio",
		"leader_election_master_status", "controller_runtime_reconcile_errors_total"}
	var exported map[string]bool
	require.Eventually(t, func() bool {
		exported = scrape(t, metricsPort)
		return !slices.ContainsFunc(want, func(n string) bool { return !exported[n] })
	}, 30*time.Second, 200*time.Millisecond, "the manager exports %v", want)
	return exported
}

func scrape(t *testing.T, port int) map[string]bool {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)) //nolint:noctx // a local scrape
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := map[string]bool{}
	for name, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		out[name] = true
		switch f.GetType().String() {
		case "HISTOGRAM":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case "SUMMARY":
			out[name+"_sum"], out[name+"_count"] = true, true
		}
	}
	return out
}

// The no-leader alert judges the manager's series being absent only when the chart's own
// ServiceMonitor scrapes it: without it, absent() would fire wherever nothing scrapes the
// manager at all.
func TestTheNoLeaderAlertJudgesAbsenceOnlyWhereTheChartScrapes(t *testing.T) {
	expr := func(args ...string) string {
		out := template(t, append([]string{"--set", "metrics.prometheusRule.enabled=true"}, args...)...)
		_, rest, ok := strings.Cut(out, "alert: KVCacheOperatorNoLeader")
		require.True(t, ok, "the chart renders KVCacheOperatorNoLeader")
		_, rest, ok = strings.Cut(rest, "expr: ")
		require.True(t, ok)
		line, _, _ := strings.Cut(rest, "\n")
		return line
	}
	assert.NotContains(t, expr(), "absent(", "no ServiceMonitor: the series' absence says nothing")
	assert.Contains(t, expr("--set", "serviceMonitor.enabled=true"), "absent(", "the chart scrapes: no series is no leader")
}
