package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
	"github.com/kvcache-operator/kvcache/values"
)

type renderOptions struct {
	files     []string
	namespace string
	store     objects.StoreOptions
	output    string
}

func newRenderCommand() *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "render [-f FILE]...",
		Short: "Print every object the operator would create for the given manifests",
		Long: `Render prints, as multi-document YAML in a stable order, every object the operator creates for
the KVCacheBackend, KVCachePool, KVCachePoolBinding, ModelDeployment, InstanceType and Setting
objects given with -f. Without -f it renders the built-in walkthrough example.

The output is what the operator applies: both call the same renderer.`,
		Example: `  # What the built-in walkthrough becomes (a store, a pool, a Binding, a ModelDeployment)
  kvcache render

  # Your own manifests, for a store in another namespace, as JSON
  kvcache render -f backend.yaml -f pool.yaml --system-namespace kv-system -o json

  # From stdin
  kubectl get kvcb mooncake-dram -o yaml | kvcache render -f -`,
		Args: cobra.NoArgs,
		RunE: printOnSuccess(o.run),
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "manifests to render: files, comma-separated lists, or directories (their .yaml, .yml and .json files); repeatable; - reads stdin")
	cmd.Flags().VarP(newNamespaceFlag(&o.namespace, "default"), "namespace", "n", "namespace of the Bindings and ModelDeployments that name none (as kubectl apply -n would create them)")
	cmd.Flags().Var(newNamespaceFlag(&o.store.SystemNamespace, generator.DefaultSystemNamespace), "system-namespace", "namespace the managed store runs in")
	cmd.Flags().StringVar(&o.store.OperatorImage, "operator-image", defaultOperatorImage(), "the operator's image, which electing leader Pods copy the launcher from and member Pods their preStop drain (the manager's --operator-image; default: the chart's)")
	cmd.Flags().StringVar(&o.store.OperatorNamespace, "operator-namespace", defaultOperatorNamespace(), "the manager's namespace, whose manager Pods the store's NetworkPolicy admits to the admin port (the manager's --namespace; default: the namespace the chart is installed in by default)")
	cmd.Flags().Var(newPeersValue(&o.store.MetricsFrom), metricsFromFlag, metricsFromUsage)
	cmd.Flags().StringVarP(&o.output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}

// defaultOperatorImage is the image the chart installs by default.
func defaultOperatorImage() string {
	d, err := values.Load()
	if err != nil {
		return ""
	}
	return d.OperatorImage
}

// defaultOperatorNamespace is the namespace the chart is installed in by default.
func defaultOperatorNamespace() string {
	d, err := values.Load()
	if err != nil {
		return ""
	}
	return d.OperatorNamespace
}

// run renders everything and returns the complete output; nothing is printed unless all of it
// rendered, so a failure never leaves half a stream on stdout.
func (o *renderOptions) run(cmd *cobra.Command) ([]byte, error) {
	if o.output != "yaml" && o.output != "json" {
		return nil, usageErrorf("--output %q: use yaml or json", o.output)
	}
	var docs []document
	var err error
	if len(o.files) == 0 {
		docs = splitDocuments("built-in walkthrough example", values.Walkthrough())
	} else if docs, err = readInputs(o.files, cmd.InOrStdin()); err != nil {
		return nil, err
	}
	in, err := readAPIInput(docs, o.namespace)
	if err != nil {
		return nil, err
	}
	r, err := generator.NewRenderer()
	if err != nil {
		return nil, err
	}
	opts := fileOptions(o.store.SystemNamespace, r)
	if err := in.validate(cmd.Context(), cmd.ErrOrStderr(), opts); err != nil {
		return nil, err
	}
	objs, err := renderAll(cmd.Context(), r, in, objects.NewFiles(in.set, opts), o.store)
	if err != nil {
		return nil, invalidErrorf("invalid: %v", err)
	}
	out, err := generator.Marshal(objs, o.output)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// renderAll renders what the operator applies for the input: the store of every backend, its
// input gathered by the operator's own function (objects.StoreInput), and the roles of every
// ModelDeployment, resolved as the operator resolves them (injection.ModelDeploymentInput).
func renderAll(ctx context.Context, r *generator.Renderer, in *apiInput, files *objects.Files, store objects.StoreOptions) ([]generator.Object, error) {
	var all []generator.Object
	backends := slices.Clone(in.set.Backends)
	sort.Slice(backends, func(i, j int) bool { return backends[i].Name < backends[j].Name })
	for i := range backends {
		on, err := objects.ReadOnBackend(ctx, files, backends[i].Name)
		if err != nil {
			return nil, err
		}
		sin, err := objects.StoreInput(ctx, files, &backends[i], on, store)
		if err != nil {
			return nil, err
		}
		objs, err := r.RenderStore(sin)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	mds, err := renderModelDeployments(ctx, r, in, files)
	if err != nil {
		return nil, err
	}
	all = append(all, mds...)
	generator.SortObjects(all)
	return all, nil
}

// renderModelDeployments renders every ModelDeployment's roles.
func renderModelDeployments(ctx context.Context, r *generator.Renderer, in *apiInput, files *objects.Files) ([]generator.Object, error) {
	var all []generator.Object
	for i := range in.models {
		md := &in.models[i]
		mi, _, rf := injection.ModelDeploymentInput(ctx, files, md)
		if rf != nil {
			return nil, fmt.Errorf("ModelDeployment %s/%s: spec.kvCache.poolRef.name: %s", md.Namespace, md.Name, rf.Message)
		}
		objs, err := r.RenderModelDeployment(mi)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	return all, nil
}

// validate runs every admission rule on every input object, as the webhooks judge a create into
// a cluster holding the rest (the Setting catalog as a default chart install leaves it), and
// reports all problems at once, each prefixed with the object it belongs to. Warnings go to
// stderr either way.
func (in *apiInput) validate(ctx context.Context, stderr io.Writer, opts objects.FileOptions) error {
	judged, err := rules.Judge(ctx, in.set, in.models, opts)
	if err != nil {
		return err
	}
	var problems []string
	for _, j := range judged {
		for _, w := range j.Verdict.Warnings {
			fmt.Fprintf(stderr, "warning: %s/%s: %s\n", j.Kind, j.Name, w)
		}
		for _, e := range j.Verdict.Errors {
			problems = append(problems, fmt.Sprintf("invalid: %s/%s: %s", j.Kind, j.Name, e.Error()))
		}
	}
	if len(problems) > 0 {
		return invalidErrorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}
