package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/rules"
	"github.com/kvcache-operator/kvcache/values"
)

type renderOptions struct {
	files           []string
	systemNamespace string
	operatorImage   string
	output          string
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
		Args: cobra.NoArgs,
		RunE: printOnSuccess(o.run),
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "manifest file to render (repeatable; - reads stdin)")
	cmd.Flags().StringVar(&o.systemNamespace, "system-namespace", generator.DefaultSystemNamespace, "namespace the managed store runs in")
	cmd.Flags().StringVar(&o.operatorImage, "operator-image", defaultOperatorImage(), "the operator's image, which electing leader Pods copy the launcher from (the manager's --operator-image; default: the chart's)")
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
	in, err := readAPIInput(docs)
	if err != nil {
		return nil, err
	}
	if err := in.validate(cmd.Context(), cmd.ErrOrStderr()); err != nil {
		return nil, err
	}
	r, err := generator.NewRenderer()
	if err != nil {
		return nil, err
	}
	objs, err := renderAll(r, in, o.systemNamespace, o.operatorImage)
	if err != nil {
		return nil, invalidErrorf("invalid: %v", err)
	}
	out, err := generator.Marshal(objs, o.output)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// renderAll renders the store of every backend; the pools and Bindings on a backend seed its
// tenant ledger.
func renderAll(r *generator.Renderer, in *apiInput, ns, operatorImage string) ([]generator.Object, error) {
	settings := in.settingValues()
	var all []generator.Object
	backends := slices.Clone(in.backends)
	sort.Slice(backends, func(i, j int) bool { return backends[i].Name < backends[j].Name })
	for i := range backends {
		b := &backends[i]
		objs, err := r.RenderStore(generator.StoreInput{
			Backend:             b,
			SystemNamespace:     ns,
			BackendImageSetting: settings["kv-cache-backend-image"],
			Tenants:             generator.TenantsFor(b.Name, in.pools, in.bindings),
			OperatorImage:       operatorImage,
		})
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
	}
	mdObjs, err := renderModelDeployments(r, in, ns)
	if err != nil {
		return nil, err
	}
	all = append(all, mdObjs...)
	generator.SortObjects(all)
	return all, nil
}

// renderModelDeployments renders each ModelDeployment's roles, resolving its cache attachment
// against the input's Bindings, pools and backends exactly as the operator resolves it against
// the cluster (a pool without status gets the status the operator would publish).
func renderModelDeployments(r *generator.Renderer, in *apiInput, ns string) ([]generator.Object, error) {
	ctx := context.Background()
	lookup := injection.NewStaticLookup(in.backends, in.pools, in.bindings, in.settings, ns, r.Defaults())
	types := map[string]*kvv1.InstanceType{}
	for i := range in.types {
		types[in.types[i].Name] = &in.types[i]
	}
	var all []generator.Object
	for i := range in.models {
		md := &in.models[i]
		mi, _, rf := injection.ModelDeploymentInput(ctx, lookup, md, types)
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
func (in *apiInput) validate(ctx context.Context, stderr io.Writer) error {
	judged, err := rules.Judge(ctx, in.files(), in.models)
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
