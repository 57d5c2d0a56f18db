// Package chart_test checks the Helm chart with the real helm binary (built by hack/tools.sh):
// it lints, renders byte-for-byte as its goldens, refuses bad values through its schema, ships
// exactly the generated CRDs, and installs into a real API server where the manager it
// configures serves the webhook configurations it installs.
package chart_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/internal/testenv"
	"github.com/kvcache-operator/kvcache/values"
	"github.com/kvcache-operator/kvcache/vocab"
)

const (
	release   = "kvcache"
	namespace = "kvcache-system"
)

func chartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "kvcache-operator") }

// helm runs the helm binary make tools built; the suite fails when it is missing.
func helm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	bin := os.Getenv("KVCACHE_HELM")
	if bin == "" {
		t.Fatal("KVCACHE_HELM is not set: run this suite with `make test` (make tools builds helm)")
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func template(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := helm(t, append([]string{"template", release, chartDir(), "--namespace", namespace}, args...)...)
	require.NoError(t, err, errOut)
	return out
}

func TestChartLintsStrict(t *testing.T) {
	out, errOut, err := helm(t, "lint", "--strict", chartDir())
	require.NoError(t, err, out+errOut)
	assert.Contains(t, out, "0 chart(s) failed")
}

func TestChartSnapshots(t *testing.T) {
	for _, c := range golden.Cases(t, golden.Dir("chart"), ".values.yaml", ".yaml") {
		t.Run(c.Name, func(t *testing.T) {
			golden.Assert(t, c.Golden, []byte(template(t, "-f", c.Input)))
		})
	}
}

func TestChartSchemaRefusesBadValues(t *testing.T) {
	cases := []struct {
		name string
		set  string
		want string
	}{
		{"a wrong type", "replicas=two", "at '/replicas': got string, want integer"},
		{"an unknown top-level key", "replica=2", "at '': additional properties 'replica' not allowed"},
		{"an unknown TLS mode", "webhook.certs.mode=acme", `at '/webhook/certs/mode': value must be one of 'self', 'certManager', 'secret'`},
		{"a misspelt dashboard switch", "metrics.dashboard.enable=true", `at '/metrics/dashboard': additional properties 'enable' not allowed`},
		{"a refusal threshold that is not positive", "metrics.prometheusRule.admissionRefusalsPerSecond=0", `at '/metrics/prometheusRule/admissionRefusalsPerSecond'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errOut, err := helm(t, "template", release, chartDir(), "--set", c.set)
			require.Error(t, err)
			assert.Contains(t, errOut, c.want)
		})
	}
	_, errOut, err := helm(t, "template", release, chartDir(), "--set", "webhook.certs.mode=secret")
	require.Error(t, err, "secret mode without its CA")
	assert.Contains(t, errOut, "webhook.certs.caBundle is required with webhook.certs.mode=secret")
}

// The chart ships exactly the CRDs `make generate` writes (plus the keep annotation).
func TestChartCRDsEqualTheGeneratedOnes(t *testing.T) {
	rendered := map[string]apiextensionsv1.CustomResourceDefinition{}
	for _, doc := range strings.Split(template(t, "--set", "crds.keep=false"), "\n---\n") {
		if !strings.Contains(doc, "kind: CustomResourceDefinition") {
			continue
		}
		var crd apiextensionsv1.CustomResourceDefinition
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &crd))
		crd.Labels = nil // the release's labels, which TestChartLabelsEveryObject checks
		rendered[crd.Name] = crd
	}
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	assert.Len(t, rendered, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var want apiextensionsv1.CustomResourceDefinition
		require.NoError(t, yaml.UnmarshalStrict(b, &want))
		assert.Equal(t, want, rendered[want.Name], "CRD %s", want.Name)
	}
	kept := template(t)
	assert.Equal(t, len(files), strings.Count(kept, "helm.sh/resource-policy: keep"), "crds.keep (the default) keeps every CRD")
}

// Every object the chart installs carries the release's labels, so `kubectl get
// <kind> -l app.kubernetes.io/instance=<release>` finds all of it, CRDs and webhook
// configurations included.
func TestChartLabelsEveryObject(t *testing.T) {
	for _, c := range golden.Cases(t, golden.Dir("chart"), ".values.yaml", ".yaml") {
		t.Run(c.Name, func(t *testing.T) {
			kinds := map[string]bool{}
			for _, doc := range strings.Split(template(t, "-f", c.Input, "--set", "crds.install=true"), "\n---\n") {
				var obj struct {
					Kind     string `json:"kind"`
					Metadata struct {
						Name   string            `json:"name"`
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
				}
				require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
				if obj.Kind == "" {
					continue // a document of comments only
				}
				kinds[obj.Kind] = true
				assert.Equal(t, release, obj.Metadata.Labels["app.kubernetes.io/instance"], "%s %s", obj.Kind, obj.Metadata.Name)
				assert.Equal(t, "Helm", obj.Metadata.Labels["app.kubernetes.io/managed-by"], "%s %s", obj.Kind, obj.Metadata.Name)
			}
			for _, k := range []string{"CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Deployment", "Job"} {
				assert.True(t, kinds[k], "the chart rendered a %s", k)
			}
		})
	}
}

// The image electing leader Pods copy the launcher from is, by default, the operator image the
// chart installs (its repository and appVersion): kvcache render and the chart agree, and the
// chart hands the manager its own image.
func TestDefaultOperatorImageIsTheChartsImage(t *testing.T) {
	dir := chartDir()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var vals struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &vals} {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(raw, into))
	}
	require.Empty(t, vals.Image.Tag, "the chart's tag defaults to its appVersion")
	d, err := values.Load()
	require.NoError(t, err)
	image := vals.Image.Repository + ":" + chart.AppVersion
	assert.Equal(t, image, d.OperatorImage)

	out := template(t)
	assert.Contains(t, out, "- --operator-image="+image, "the manager is told its own image")
}

// The images the chart makes the kubelet ask for are the ones hack/images.sh builds: containerd
// files an image under its fully qualified name and resolves a short one as docker.io/<name>, so
// each image the chart names (the manager's, the uninstall check's, the one leader Pods copy
// the launcher from, and the store image of the Setting catalog) must normalize to exactly the
// name the local build tags.
func TestChartImagesAreTheOnesTheBuildTags(t *testing.T) {
	built := map[string]string{}
	for _, image := range []string{"operator", "store"} {
		out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "images.sh"), "name", image).CombinedOutput()
		require.NoError(t, err, "hack/images.sh name %s: %s", image, out)
		name := strings.TrimSpace(string(out))
		ref, err := reference.ParseNamed(name)
		require.NoError(t, err, "hack/images.sh tags %s as %q, which is not a fully qualified reference", image, name)
		require.Equal(t, name, ref.String())
		built[image] = name
	}
	normalized := func(s string) string {
		t.Helper()
		ref, err := reference.ParseNormalizedNamed(s)
		require.NoError(t, err, "the chart names the image %q", s)
		return ref.String()
	}
	for _, doc := range strings.Split(template(t), "\n---\n") {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec corev1.PodSpec `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		if obj.Kind != "Deployment" && obj.Kind != "Job" {
			continue
		}
		c := obj.Spec.Template.Spec.Containers[0]
		assert.Equal(t, built["operator"], normalized(c.Image), "%s %s's image", obj.Kind, c.Name)
		if obj.Kind != "Deployment" {
			continue
		}
		var sawLauncher, sawStore bool
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--operator-image="); ok {
				sawLauncher = true
				assert.Equal(t, built["operator"], normalized(v), "--operator-image")
			}
			if v, ok := strings.CutPrefix(a, "--setting="+kvv1.SettingKVCacheBackendImage+"="); ok {
				sawStore = true
				assert.Equal(t, built["store"], normalized(v), "the Setting %s", kvv1.SettingKVCacheBackendImage)
			}
		}
		assert.True(t, sawLauncher && sawStore, "the manager gets --operator-image and the store image Setting: %v", c.Args)
	}
}

// The stores' NetworkPolicies admit the manager by its namespace and by the name label of its
// Pods (vocab.ManagerAppName), and the scraper the chart names: the chart's manager Pods carry
// that label, the manager learns its namespace from the Pod, `kvcache render` defaults to the
// namespace the chart is installed in here, and networkPolicy.metricsFrom reaches the manager
// as a flag value it parses back into the same peers.
func TestChartTellsTheManagerWhatStoreNetworkPoliciesAdmit(t *testing.T) {
	d, err := values.Load()
	require.NoError(t, err)
	assert.Equal(t, namespace, d.OperatorNamespace, "kvcache render's default --operator-namespace")
	scraper := `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"prometheus"}}},{"ipBlock":{"cidr":"10.0.0.0/8"}}]`
	for _, c := range []struct {
		name string
		args []string
		want []networkingv1.NetworkPolicyPeer
	}{
		{"by default no scraper", nil, nil},
		{"the scrapers the values name", []string{"--set-json", "networkPolicy.metricsFrom=" + scraper}, []networkingv1.NetworkPolicyPeer{
			{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
			},
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var manager *appsv1.Deployment
			for _, doc := range strings.Split(template(t, c.args...), "\n---\n") {
				if strings.Contains(doc, "\nkind: Deployment\n") {
					manager = &appsv1.Deployment{}
					require.NoError(t, yaml.Unmarshal([]byte(doc), manager))
				}
			}
			require.NotNil(t, manager, "the chart renders the manager's Deployment")
			pod := manager.Spec.Template
			assert.Equal(t, vocab.ManagerAppName, pod.Labels[vocab.LabelName], "the label the stores' NetworkPolicies select the manager's Pods by")
			assert.Equal(t, vocab.ManagerAppName, manager.Spec.Selector.MatchLabels[vocab.LabelName], "a selector label, which podLabels cannot change")
			ctr := pod.Spec.Containers[0]
			var ns *corev1.EnvVar
			for i := range ctr.Env {
				if ctr.Env[i].Name == "POD_NAMESPACE" {
					ns = &ctr.Env[i]
				}
			}
			require.NotNil(t, ns, "the manager's --namespace defaults to $POD_NAMESPACE")
			require.NotNil(t, ns.ValueFrom)
			assert.Equal(t, "metadata.namespace", ns.ValueFrom.FieldRef.FieldPath)
			var flags []string
			for _, a := range ctr.Args {
				if v, ok := strings.CutPrefix(a, "--network-policy-metrics-from="); ok {
					flags = append(flags, v)
				}
			}
			require.Len(t, flags, 1, "the manager gets --network-policy-metrics-from once: %v", ctr.Args)
			got, err := generator.ParseNetworkPolicyPeers(flags[0])
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
	_, errOut, err := helm(t, "template", release, chartDir(), "--set-json", `networkPolicy.metricsFrom=[{}]`)
	require.Error(t, err, "a peer that names nothing would admit every Pod")
	assert.Contains(t, errOut, "/networkPolicy/metricsFrom/0")
}
