package main

import (
	"bytes"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/check"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/rules"
)

type checkOptions struct {
	files           []string
	cluster         []string
	liveCluster     bool
	kubeconfig      string
	context         string
	namespace       string
	allNamespaces   bool
	systemNamespace string
	output          string
}

func newCheckCommand() *cobra.Command {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check [-f FILE]... [--cluster FILE]...",
		Short: "Diagnose a live cluster, or manifests, and say what to fix",
		Long: `Check reports one finding per line: PASS, WARN or FAIL, the check, the object, and the fix.
It exits 1 when any finding is a FAIL.

Without -f it checks the cluster of the kubeconfig (kubectl's conventions: --kubeconfig,
--context, -n, -A): the Pod webhooks are configured and answer through the API server with a CA
that verifies their certificate; the manager holds its controllers' Lease; every backend is Ready
with its capacity observed, its members mounted on the nodes its groups select and, when it
elects, its leader's Lease held; every Binding's tenant is granted, its domain its own and its
cache written to; every injected Pod still matches what injection writes now; every
ModelDeployment passes the admission rules, its engine on its store's Mooncake line. It only
reads, apart from a server-side dry-run create of an opted-in Pod that proves the webhook
answers.

With -f it checks manifests as the webhooks would judge them if applied to a cluster holding the
--cluster files (or, with --live, the objects the kubeconfig's cluster holds): every admission
rule on this API's objects, each judged as an update of the object of the same kind and name the
cluster holds and as a create otherwise, and the injection of every opted-in Pod and Pod
template; a Pod or template that carries the injection annotations with an inject label other
than "true" fails, since no webhook ever sees it. List documents (kubectl get -o yaml) are read
item by item.`,
		Example: `  # The whole installation: webhooks, Leases, stores, Bindings, injected Pods, ModelDeployments
  kvcache check -A

  # Manifests before they are applied, against the objects the cluster holds
  kvcache check -f chat.yaml --live -n team-a

  # The same offline, against files, as JSON
  kvcache check -f chat.yaml --cluster binding.yaml --cluster pool.yaml --cluster backend.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "manifests to check offline: files, comma-separated lists, or directories (their .yaml, .yml and .json files); repeatable; - reads stdin")
	f.StringArrayVar(&o.cluster, "cluster", nil, "with -f: the objects the cluster already holds (Bindings, pools, backends, Settings, InstanceTypes, ModelDeployments)")
	f.BoolVar(&o.liveCluster, "live", false, "with -f: read the objects the cluster already holds from the kubeconfig's cluster instead of --cluster files")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "the kubeconfig context to use")
	f.VarP(newNamespaceFlag(&o.namespace, ""), "namespace", "n", "namespace of the Bindings, ModelDeployments and Pods to check (default: the context's); with -f, of documents that name none")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "check Bindings, ModelDeployments and Pods in every namespace")
	f.Var(newNamespaceFlag(&o.systemNamespace, generator.DefaultSystemNamespace), "system-namespace", "namespace managed stores and the manager's Lease live in")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func (o *checkOptions) run(cmd *cobra.Command, _ []string) error {
	switch o.output {
	case "table", "json", "yaml":
	default:
		return usageErrorf("--output %q: use table, json or yaml", o.output)
	}
	if o.allNamespaces && o.namespace != "" {
		return usageErrorf("-n and -A are exclusive: name one namespace, or all")
	}
	r, err := generator.NewRenderer()
	if err != nil {
		return err
	}
	var report *check.Report
	switch {
	case len(o.files) > 0 && o.liveCluster && len(o.cluster) > 0:
		return usageErrorf("--live and --cluster both describe the cluster the manifests meet: give one")
	case len(o.files) > 0:
		report, err = o.offline(cmd, r)
	case len(o.cluster) > 0:
		return usageErrorf("--cluster describes the cluster of an offline check: give the manifests with -f")
	case o.liveCluster:
		return usageErrorf("--live judges manifests against the live cluster: give them with -f")
	default:
		report, err = o.live(cmd, r)
	}
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := report.Write(&out, o.output); err != nil {
		return err
	}
	if _, err := cmd.OutOrStdout().Write(out.Bytes()); err != nil {
		return err
	}
	if report.Failed() {
		return &exitError{code: exitInvalid, msg: failedSummary(report.Counts()[check.Fail])}
	}
	return nil
}

// offline checks manifests: this API's objects by the admission rules, Pods by injection.
func (o *checkOptions) offline(cmd *cobra.Command, r *generator.Renderer) (*check.Report, error) {
	ns := o.namespace
	if ns == "" {
		ns = "default"
	}
	docs, err := readInputs(o.files, cmd.InOrStdin())
	if err != nil {
		return nil, err
	}
	var apiDocs []document
	var pods []check.PodInput
	for _, d := range docs {
		gvk, _, err := d.typeMeta()
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		if gvk.Group == kvv1.GroupVersion.Group {
			apiDocs = append(apiDocs, d)
			continue
		}
		h, err := decodePodHolder(d, ns)
		if err != nil {
			return nil, err
		}
		if h != nil {
			pods = append(pods, check.PodInput{Object: h.gvk.Kind + "/" + h.namespace + "/" + h.name, Namespace: h.namespace, Pod: h.pod, Misplaced: h.misplaced})
		}
	}
	creates, err := readAPIInput(apiDocs, ns)
	if err != nil {
		return nil, err
	}
	cluster, err := readClusterFiles(o.cluster, cmd.InOrStdin(), ns)
	if err != nil {
		return nil, err
	}
	if o.liveCluster {
		c, _, err := o.client()
		if err != nil {
			return nil, err
		}
		if cluster.set, cluster.models, err = check.Held(cmd.Context(), c); err != nil {
			return nil, err
		}
	}
	// The Pods resolve against everything, the manifests' own objects included, as they would
	// once applied.
	return check.Offline(cmd.Context(), rules.Apply{
		Cluster: cluster.set, ClusterModels: cluster.models, Manifests: creates.set, Models: creates.models,
		Options: fileOptions(o.systemNamespace, r), Renderer: r,
	}, pods, injection.New(r), o.missingHint())
}

// missingHint is what a finding of a Binding, pool or backend that is nowhere adds: offline,
// where the cluster's objects came from --cluster files or from none, how to give them.
func (o *checkOptions) missingHint() string {
	if o.liveCluster {
		return ""
	}
	return "kvcache check -f read the cluster's objects from " + clusterFilesRead(o.cluster) + ", not from a cluster: pass them with --cluster FILE, or --live to read the kubeconfig's cluster"
}

// clusterFilesRead says which --cluster files a command read, for a message.
func clusterFilesRead(files []string) string {
	if len(files) == 0 {
		return "no --cluster file"
	}
	return "the --cluster files alone"
}

// client is an uncached client of the kubeconfig's cluster, with the context's namespace.
func (o *checkOptions) client() (client.Client, string, error) {
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", usageErrorf("no cluster to check: %v (pass --kubeconfig or --context, or check manifests with -f)", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", usageErrorf("%v", err)
	}
	scheme, err := generator.NewScheme()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	return c, ns, err
}

// live checks the cluster of the kubeconfig.
func (o *checkOptions) live(cmd *cobra.Command, r *generator.Renderer) (*check.Report, error) {
	c, contextNamespace, err := o.client()
	if err != nil {
		return nil, err
	}
	ns := o.namespace
	if ns == "" && !o.allNamespaces {
		ns = contextNamespace
	}
	return check.Live(cmd.Context(), c, check.LiveOptions{
		SystemNamespace: o.systemNamespace, Namespace: ns, Injector: injection.New(r),
	})
}

// failedSummary is check's closing line on stderr when findings fail.
func failedSummary(n int) string {
	if n == 1 {
		return "1 finding failed"
	}
	return fmt.Sprintf("%d findings failed", n)
}
