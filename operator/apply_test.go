package operator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kvcache-operator/kvcache/vocab"
)

func rendered() *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "mooncake-dram-leader", Namespace: "gpustack-system", Labels: map[string]string{"app.kubernetes.io/name": "kv-cache-backend"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "kv-cache-backend", "app.kubernetes.io/component": "leader"}},
				Spec: corev1.PodSpec{
					ServiceAccountName:           "default",
					AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{
						Name: "leader", Image: "gpustack/mirrored-mooncake:0.3.13.post1-cpu",
						Command: []string{"mooncake_master"}, Args: []string{"-rpc_port=50051", "-metrics_port=9003"},
						Env:   []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
						Ports: []corev1.ContainerPort{{Name: "rpc", ContainerPort: 50051, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/get_all_segments", Port: intstr.FromString("admin")}},
							PeriodSeconds: 5},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8320Mi")}},
					}},
				},
			},
		},
	}
}

// live is what the API server stores for rendered(): its defaults added, the deprecated
// serviceAccount alias filled in, metadata and status of its own.
func live() *appsv1.Deployment {
	d := rendered()
	d.TypeMeta = metav1.TypeMeta{} // a typed object read back carries none
	d.UID, d.ResourceVersion, d.Generation = "0f3c", "42", 3
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "3", vocab.AnnotationAppliedHash: "h"}
	d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	s := &d.Spec.Template.Spec
	s.DeprecatedServiceAccount = "default"
	s.RestartPolicy, s.DNSPolicy, s.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, "default-scheduler"
	c := &s.Containers[0]
	c.ImagePullPolicy, c.TerminationMessagePath = corev1.PullIfNotPresent, "/dev/termination-log"
	c.ReadinessProbe.HTTPGet.Scheme = corev1.URISchemeHTTP
	c.ReadinessProbe.TimeoutSeconds, c.ReadinessProbe.SuccessThreshold, c.ReadinessProbe.FailureThreshold = 1, 1, 3
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 1, ReadyReplicas: 1}
	return d
}

func TestDrift(t *testing.T) {
	cases := []struct {
		name string
		edit func(d *appsv1.Deployment)
		path string
	}{
		{"the API server's defaults and fields of its own are no drift", func(*appsv1.Deployment) {}, ""},
		{"a label another manager added is no drift", func(d *appsv1.Deployment) { d.Labels["team"] = "infra" }, ""},
		{"an env entry another manager added is no drift (it keeps its own entry)", func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec.Containers[0]
			c.Env = append(c.Env, corev1.EnvVar{Name: "DEBUG", Value: "1"})
		}, ""},
		{"env entries in another order are no drift: they merge by name", func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec.Containers[0]
			c.Env[0], c.Env[1] = c.Env[1], c.Env[0]
		}, ""},
		{"kubectl scale", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) }, ".spec.replicas"},
		{"an edited env value", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Env[1].Value = "3" },
			".spec.template.spec.containers[name=leader].env[name=B].value"},
		{"a removed env entry", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Env = d.Spec.Template.Spec.Containers[0].Env[:1]
		}, ".spec.template.spec.containers[name=leader].env[name=B]"},
		{"a removed label", func(d *appsv1.Deployment) { delete(d.Spec.Template.Labels, "app.kubernetes.io/name") },
			".spec.template.metadata.labels.app.kubernetes.io/name"},
		{"args are compared whole: one more is drift", func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec.Containers[0]
			c.Args = append(c.Args, "-enable_snapshot=true")
		}, ".spec.template.spec.containers[name=leader].args"},
		{"an edited arg", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Args[1] = "-metrics_port=9004" },
			".spec.template.spec.containers[name=leader].args[1]"},
		{"a token mounted after all", func(d *appsv1.Deployment) { d.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(true) },
			".spec.template.spec.automountServiceAccountToken"},
		{"another account", func(d *appsv1.Deployment) { d.Spec.Template.Spec.ServiceAccountName = "mooncake-dram-leader" },
			".spec.template.spec.serviceAccountName"},
		{"a changed memory request", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}, ".spec.template.spec.containers[name=leader].resources.requests.memory"},
		{"the same memory request spelled otherwise is no drift", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(8320<<20, resource.BinarySI)
		}, ""},
		{"a removed probe", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].ReadinessProbe = nil },
			".spec.template.spec.containers[name=leader].readinessProbe"},
		{"a renamed container", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "master" },
			".spec.template.spec.containers[name=leader]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			applied, err := appliedConfig(rendered(), "h")
			require.NoError(t, err)
			l := live()
			c.edit(l)
			path, err := Drift(applied.Object, l)
			require.NoError(t, err)
			assert.Equal(t, c.path, path)
		})
	}
}

func TestRefreshUsage(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-ago)} }
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	cases := []struct {
		name string
		prev Usage
		read *resource.Quantity
		want Usage
	}{
		{"nothing read: absent, not zero", Usage{Bytes: q("1Gi"), At: at(time.Minute)}, nil, Usage{}},
		{"the first figure is written at once", Usage{}, q("64Mi"), Usage{Bytes: q("64Mi"), At: at(0)}},
		{"an unchanged figure keeps its time", Usage{Bytes: q("64Mi"), At: at(time.Hour)}, q("64Mi"), Usage{Bytes: q("64Mi"), At: at(time.Hour)}},
		{"a figure that moved is not written before the refresh is due", Usage{Bytes: q("64Mi"), At: at(time.Minute)}, q("65Mi"), Usage{Bytes: q("64Mi"), At: at(time.Minute)}},
		{"then it is", Usage{Bytes: q("64Mi"), At: at(5 * time.Minute)}, q("65Mi"), Usage{Bytes: q("65Mi"), At: at(0)}},
		{"zero to some is written at once", Usage{Bytes: q("0"), At: at(time.Second)}, q("4Ki"), Usage{Bytes: q("4Ki"), At: at(0)}},
		{"some to zero is written at once", Usage{Bytes: q("4Ki"), At: at(time.Second)}, q("0"), Usage{Bytes: q("0"), At: at(0)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := RefreshUsage(c.prev, c.read, now, 5*time.Minute)
			if c.want.Bytes == nil {
				assert.Nil(t, got.Bytes)
			} else {
				require.NotNil(t, got.Bytes)
				assert.Equal(t, c.want.Bytes.String(), got.Bytes.String())
			}
			assert.Equal(t, c.want.At, got.At)
		})
	}
}
