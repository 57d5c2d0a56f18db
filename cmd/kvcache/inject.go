package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
)

type injectOptions struct {
	files           []string
	cluster         []string
	systemNamespace string
	namespace       string
	output          string
}

func newInjectCommand() *cobra.Command {
	o := &injectOptions{}
	cmd := &cobra.Command{
		Use:   "inject -f FILE [--cluster FILE]...",
		Short: "Apply exactly the admission webhook's injection to the Pods and pod templates in FILE",
		Long: `Inject applies the Pod mutating webhook's injection to every Pod and pod template (Pod,
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) in FILE and prints the result.
Other documents, and Pods without the kvcache.gpustack.ai/inject: "true" label, pass through
unchanged; one that carries the injection annotations with another label value ("True", "1")
is never injected by the webhook either, and a warning says so. A List document (what
kubectl get -o yaml prints) is read item by item and printed as a List.

A document that names no namespace is injected as if created in --namespace (-n, kubectl's
convention; "default" unless given), which is where its Pods would look for their Binding.

--cluster files hold the objects the webhook would read: KVCachePoolBindings, KVCachePools,
KVCacheBackends and Settings. A pool without status gets the status the operator would publish.

A refused Pod exits 1 with "refused: <kind>/<name>: <message>" on stderr and nothing on stdout.
Admission warnings are printed on stderr as "warning: ...".`,
		Example: `  # What the webhook writes into a Deployment's Pods, judged against files of the cluster's objects
  kvcache inject -f chat.yaml --cluster binding.yaml --cluster pool.yaml --cluster backend.yaml -n team-a

  # Against the objects a live cluster holds, as the webhook itself answers
  kubectl -n team-a create --dry-run=server -f chat.yaml -o yaml`,
		Args: cobra.NoArgs,
		RunE: printOnSuccess(o.run),
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "manifests to inject: files, comma-separated lists, or directories (their .yaml, .yml and .json files); repeatable; - reads stdin")
	cmd.Flags().StringArrayVar(&o.cluster, "cluster", nil, "objects the webhook would read: Bindings, pools, backends, Settings (repeatable)")
	cmd.Flags().VarP(newNamespaceFlag(&o.namespace, "default"), "namespace", "n", "namespace of documents that name none (as kubectl apply -n would create them)")
	cmd.Flags().Var(newNamespaceFlag(&o.systemNamespace, generator.DefaultSystemNamespace), "system-namespace", "namespace managed stores run in (for derived pool endpoints)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}

// podHolder kinds: where each keeps its Pod template.
var podHolders = map[schema.GroupKind]func() runtime.Object{
	{Kind: "Pod"}:                        func() runtime.Object { return &corev1.Pod{} },
	{Group: "apps", Kind: "Deployment"}:  func() runtime.Object { return &appsv1.Deployment{} },
	{Group: "apps", Kind: "StatefulSet"}: func() runtime.Object { return &appsv1.StatefulSet{} },
	{Group: "apps", Kind: "DaemonSet"}:   func() runtime.Object { return &appsv1.DaemonSet{} },
	{Group: "apps", Kind: "ReplicaSet"}:  func() runtime.Object { return &appsv1.ReplicaSet{} },
	{Group: "batch", Kind: "Job"}:        func() runtime.Object { return &batchv1.Job{} },
	{Group: "batch", Kind: "CronJob"}:    func() runtime.Object { return &batchv1.CronJob{} },
}

// podTemplate returns the Pod metadata and spec an object holds.
func podTemplate(obj runtime.Object) (*metav1.ObjectMeta, *corev1.PodSpec) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &o.ObjectMeta, &o.Spec
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.StatefulSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.ReplicaSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.Job:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *batchv1.CronJob:
		return &o.Spec.JobTemplate.Spec.Template.ObjectMeta, &o.Spec.JobTemplate.Spec.Template.Spec
	}
	return nil, nil
}

// outDoc is one output object: its original bytes when unchanged, or the injected document
// (the original with only the Pod's labels, annotations and spec replaced), and the List it is an
// item of, if any.
type outDoc struct {
	raw  []byte
	obj  map[string]any
	list *listDocument
}

// podTemplatePointer is the JSON pointer to where a pod holder keeps its Pod template ("" for a
// Pod: the object itself).
func podTemplatePointer(kind string) string {
	switch kind {
	case "Pod":
		return ""
	case "CronJob":
		return "/spec/jobTemplate/spec/template"
	}
	return "/spec/template"
}

// missingHint is what a refusal for a Binding, pool or backend adds: inject reads the
// cluster's objects from --cluster files only.
func (o *injectOptions) missingHint() string {
	return "kvcache inject read the cluster's objects from " + clusterFilesRead(o.cluster) +
		", not from a cluster: pass them with --cluster FILE (kubectl get kvcachepoolbindings,kvcachepools,kvcachebackends,settings -A -o yaml > cluster.yaml)"
}

func (o *injectOptions) run(cmd *cobra.Command) ([]byte, error) {
	if o.output != "yaml" && o.output != "json" {
		return nil, usageErrorf("--output %q: use yaml or json", o.output)
	}
	if len(o.files) == 0 {
		return nil, usageErrorf("-f FILE is required: the manifests to inject")
	}
	docs, err := readInputs(o.files, cmd.InOrStdin())
	if err != nil {
		return nil, err
	}
	cluster, err := readClusterFiles(o.cluster, cmd.InOrStdin(), o.namespace)
	if err != nil {
		return nil, err
	}
	r, err := generator.NewRenderer()
	if err != nil {
		return nil, err
	}
	lookup := objects.NewFiles(cluster.set, fileOptions(o.systemNamespace, r))
	inj := injection.New(r)

	var outs []outDoc
	var refusals []string
	var missing bool
	for _, d := range docs {
		od, refusal, warns, miss, err := injectDocument(cmd.Context(), inj, lookup, d, o.namespace)
		if err != nil {
			return nil, err
		}
		missing = missing || miss
		for _, w := range warns {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
		}
		if refusal != "" {
			refusals = append(refusals, refusal)
			continue
		}
		outs = append(outs, od)
	}
	if len(refusals) > 0 {
		if missing {
			// The refusal lines stay the webhook's own words; where the lookup was offline, this
			// says so once.
			refusals = append(refusals, "note: "+o.missingHint())
		}
		return nil, invalidErrorf("%s", strings.Join(refusals, "\n"))
	}
	return marshalDocs(outs, o.output)
}

// injectDocument injects one document. It returns the output document, or the refusal line
// (missing: for a Binding, pool or backend lookup lacks), and the warning lines.
func injectDocument(ctx context.Context, inj *injection.Injector, lookup objects.Reader, d document, namespace string) (out outDoc, refusal string, warns []string, missing bool, err error) {
	keep := outDoc{raw: d.raw, list: d.list}
	h, err := decodePodHolder(d, namespace)
	if err != nil || h == nil {
		return keep, "", nil, false, err
	}
	if !injection.OptedIn(h.pod) {
		if w := h.misplaced; w != "" {
			return keep, "", []string{fmt.Sprintf("%s/%s: %s", h.gvk.Kind, h.name, w)}, false, nil
		}
		if w := injection.LeftAlone(h.pod); w != "" {
			return keep, "", []string{fmt.Sprintf("%s/%s: %s", h.gvk.Kind, h.name, w)}, false, nil
		}
		if w := injection.Unlabelled(h.pod); w != "" {
			return keep, "", []string{fmt.Sprintf("%s/%s: %s", h.gvk.Kind, h.name, w)}, false, nil
		}
		return keep, "", nil, false, nil
	}
	pod, ns, name, gvk, j := h.pod, h.namespace, h.name, h.gvk, h.json
	res, err := inj.Inject(ctx, pod, ns, lookup)
	var rf *injection.Refusal
	if errors.As(err, &rf) {
		return keep, fmt.Sprintf("refused: %s/%s: %s", gvk.Kind, name, rf.Message), nil, rf.ObjectMissing(), nil
	}
	if err != nil {
		return keep, "", nil, false, err
	}
	for _, w := range res.Warnings {
		warns = append(warns, fmt.Sprintf("%s/%s: %s", gvk.Kind, name, w))
	}
	if len(res.Patch) == 0 {
		return keep, "", warns, false, nil
	}
	// The webhook's own patch, applied where this kind keeps its Pod template: the document is
	// what the API server stores for the Pod, by construction.
	patched, err := res.Patch.Apply(j, podTemplatePointer(gvk.Kind))
	if err != nil {
		return keep, "", nil, false, err
	}
	var doc map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(patched, &doc); err != nil {
		return keep, "", nil, false, err
	}
	return outDoc{raw: d.raw, obj: doc, list: d.list}, "", warns, false, nil
}

// value is the document as a JSON value: the injected object, or the original decoded.
func (d outDoc) value() (any, error) {
	if d.obj != nil {
		return d.obj, nil
	}
	j, err := yaml.YAMLToJSON(d.raw)
	if err != nil {
		return nil, err
	}
	var v any
	err = sigsjson.UnmarshalCaseSensitivePreserveInts(j, &v)
	return v, err
}

func writeRaw(buf *bytes.Buffer, raw []byte) {
	buf.Write(raw)
	if !bytes.HasSuffix(raw, []byte("\n")) {
		buf.WriteByte('\n')
	}
}

// podHolder is a document holding a Pod or a Pod template, as the Pod it would create.
type podHolder struct {
	pod       *corev1.Pod
	namespace string // the document's, or the default for documents that name none
	name      string
	gvk       schema.GroupVersionKind
	json      []byte
	// misplaced says why a workload whose own metadata carries the opt-in is not injected
	// (injection.Misplaced); "" otherwise.
	misplaced string
}

// decodePodHolder reads a document as one of the kinds that hold a Pod template; nil for any
// other kind.
func decodePodHolder(d document, namespace string) (*podHolder, error) {
	gvk, j, err := d.typeMeta()
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	newObj, ok := podHolders[gvk.GroupKind()]
	if !ok {
		return nil, nil
	}
	obj := newObj()
	if err := d.decodeStrict(j, obj); err != nil {
		return nil, usageErrorf("%v", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	objMeta, spec := podTemplate(obj)
	top, _ := obj.(metav1.Object)
	ns := top.GetNamespace()
	if ns == "" {
		ns = namespace
	}
	name := top.GetName()
	if name == "" {
		name = top.GetGenerateName()
	}
	pod := &corev1.Pod{ObjectMeta: *objMeta.DeepCopy(), Spec: *spec.DeepCopy()}
	pod.Namespace = ns
	h := &podHolder{pod: pod, namespace: ns, name: name, gvk: gvk, json: j}
	if path := podTemplatePointer(gvk.Kind); path != "" {
		h.misplaced = injection.Misplaced(gvk.Kind, top, pod, strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "."))
	}
	return h, nil
}

// marshalDocs writes the documents in input order: unchanged ones byte for byte (YAML) and
// injected ones with sorted keys. The items of an input List stay a List (YAML): the List as
// written when no item changed, otherwise the List with its items replaced by what injection
// made of them. As JSON, every object is an item of the one List printed.
func marshalDocs(docs []outDoc, format string) ([]byte, error) {
	var items []any
	var buf bytes.Buffer
	for k := 0; k < len(docs); k++ {
		d := docs[k]
		if format == "json" {
			item, err := d.value()
			if err != nil {
				return nil, err
			}
			items = append(items, item)
			continue
		}
		buf.WriteString("---\n")
		var item any = d.obj
		if d.list != nil {
			group := k
			changed := false
			for ; k < len(docs) && docs[k].list == d.list; k++ {
				changed = changed || docs[k].obj != nil
			}
			if !changed {
				k--
				writeRaw(&buf, d.list.raw)
				continue
			}
			list := make(map[string]any, len(d.list.obj))
			for key, v := range d.list.obj {
				list[key] = v
			}
			var listItems []any
			for _, x := range docs[group:k] {
				v, err := x.value()
				if err != nil {
					return nil, err
				}
				listItems = append(listItems, v)
			}
			k--
			list["items"] = listItems
			item = list
		} else if d.obj == nil {
			writeRaw(&buf, d.raw)
			continue
		}
		b, err := yaml.Marshal(item)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	if format == "json" {
		b, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	}
	return buf.Bytes(), nil
}
