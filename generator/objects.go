package generator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/releaseutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Object is a typed Kubernetes object: what the generator returns and the operator applies.
type Object interface {
	metav1.Object
	runtime.Object
}

// NewScheme knows the core Kubernetes kinds and this project's API.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := kvv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// decoder turns rendered YAML into typed objects. It is strict: a template that writes a field
// the type does not have, or the same key twice, is a bug, and silently dropping it would hide
// it. Each document is parsed once (YAML to JSON, which also catches duplicate keys) and then
// decoded with the Kubernetes JSON decoder; YAML parsing dominates the cost of a render.
type decoder struct {
	scheme *runtime.Scheme
}

func newDecoder(s *runtime.Scheme) decoder {
	return decoder{scheme: s}
}

// decodeAll splits a multi-document YAML stream and decodes every non-empty document. source
// names the stream in errors.
func (d decoder) decodeAll(source string, stream []byte) ([]Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var out []Object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		objs, err := d.decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w\n%s", source, i, err, doc)
		}
		out = append(out, objs...)
	}
}

// decode returns nothing for a document with no content (only comments or whitespace), and a
// List's items (kind List, as kubectl get -o yaml prints them) for a List.
func (d decoder) decode(doc []byte) ([]Object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(j, []byte("null")) {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return nil, err
	}
	if strings.HasSuffix(tm.Kind, "List") {
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(j, &l); err == nil && l.Items != nil {
			var out []Object
			for k, it := range l.Items {
				objs, err := d.decode(it)
				if err != nil {
					return nil, fmt.Errorf("items[%d]: %w", k, err)
				}
				out = append(out, objs...)
			}
			return out, nil
		}
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil, err
	}
	gvk := gv.WithKind(tm.Kind)
	ro, err := d.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	strict, err := sigsjson.UnmarshalStrict(j, ro)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	o, ok := ro.(Object)
	if !ok {
		return nil, fmt.Errorf("%s is not an object with metadata", gvk)
	}
	o.GetObjectKind().SetGroupVersionKind(gvk)
	return []Object{o}, nil
}

// installRank orders kinds as Helm installs them (ServiceAccounts and RBAC before the workloads
// that use them); kinds Helm does not know go last, alphabetically.
var installRank = func() map[string]int {
	m := map[string]int{}
	for i, k := range releaseutil.InstallOrder {
		m[k] = i
	}
	return m
}()

// SortObjects orders objects deterministically: install order of the kind, then namespace,
// then name.
func SortObjects(objs []Object) {
	rank := func(o Object) (int, string) {
		k := o.GetObjectKind().GroupVersionKind().Kind
		if r, ok := installRank[k]; ok {
			return r, k
		}
		return len(installRank), k
	}
	sort.SliceStable(objs, func(i, j int) bool {
		ri, ki := rank(objs[i])
		rj, kj := rank(objs[j])
		if ri != rj {
			return ri < rj
		}
		if ki != kj {
			return ki < kj
		}
		if objs[i].GetNamespace() != objs[j].GetNamespace() {
			return objs[i].GetNamespace() < objs[j].GetNamespace()
		}
		return objs[i].GetName() < objs[j].GetName()
	})
}
