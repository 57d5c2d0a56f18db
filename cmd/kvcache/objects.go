package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
)

// apiKinds are the kinds of this project's API that the CLI reads, in the order the
// walkthrough creates them.
var apiKinds = []string{"Setting", "InstanceType", "KVCacheBackend", "KVCachePool", "KVCachePoolBinding", "ModelDeployment"}

// newAPIObject returns an empty object of one of this API's kinds.
func newAPIObject(kind string) (kvObject, bool) {
	switch kind {
	case "KVCacheBackend":
		return &kvv1.KVCacheBackend{}, true
	case "KVCachePool":
		return &kvv1.KVCachePool{}, true
	case "KVCachePoolBinding":
		return &kvv1.KVCachePoolBinding{}, true
	case "ModelDeployment":
		return &kvv1.ModelDeployment{}, true
	case "InstanceType":
		return &kvv1.InstanceType{}, true
	case "Setting":
		return &kvv1.Setting{}, true
	}
	return nil, false
}

// kvObject is any kind of this API.
type kvObject interface {
	GetName() string
	GetNamespace() string
	SetNamespace(string)
	Default()
}

// namespaced reports whether a kind of this API is namespaced.
func namespaced(kind string) bool { return kind == "KVCachePoolBinding" || kind == "ModelDeployment" }

// apiInput is a set of this API's objects read from files: what the objects package reads, and
// the ModelDeployments.
type apiInput struct {
	set    objects.Set
	models []kvv1.ModelDeployment
}

// decodeAPIObject decodes a document that must be one of this API's kinds. Anything else is a
// usage error naming what is accepted. A namespaced object that names no namespace is put in
// namespace.
func decodeAPIObject(d document, namespace string) (kvObject, string, error) {
	gvk, j, err := d.typeMeta()
	if err != nil {
		return nil, "", err
	}
	obj, known := newAPIObject(gvk.Kind)
	switch {
	case gvk.Group == kvv1.GroupVersion.Group && gvk.Version != kvv1.GroupVersion.Version:
		return nil, "", fmt.Errorf("%s: apiVersion %s is not served: use %s", d, gvk.GroupVersion(), kvv1.GroupVersion)
	case gvk.Group != kvv1.GroupVersion.Group || !known:
		return nil, "", fmt.Errorf("%s: kind %s (%s) is not an input here: give %s objects of %s", d, gvk.Kind, gvk.GroupVersion(), strings.Join(apiKinds, ", "), kvv1.GroupVersion)
	}
	if err := d.decodeStrict(j, obj); err != nil {
		if errors.Is(err, resource.ErrFormatWrong) || strings.Contains(err.Error(), "quantities must match") {
			if where := badQuantity(j); where != "" {
				return nil, "", fmt.Errorf("%s: %s", d, where)
			}
		}
		return nil, "", err
	}
	if namespaced(gvk.Kind) && obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	if obj.GetName() == "" {
		return nil, "", fmt.Errorf("%s: %s needs metadata.name", d, gvk.Kind)
	}
	return obj, gvk.Kind, nil
}

// quantityFields are the field names of this API that hold a resource.Quantity.
var quantityFields = map[string]bool{"capacityPerMember": true, "localBufferSize": true, "total": true, "ceiling": true, "cpuPerAccelerator": true, "memoryPerAccelerator": true}

// badQuantity finds the first quantity field that does not parse and says where and why; the
// JSON decoder's own error names neither.
func badQuantity(j []byte) string {
	var u any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, &u); err != nil {
		return ""
	}
	var walk func(path string, v any) string
	walk = func(path string, v any) string {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				p := k
				if path != "" {
					p = path + "." + k
				}
				if s, ok := t[k].(string); ok && quantityFields[k] {
					if _, err := resource.ParseQuantity(s); err != nil {
						return fmt.Sprintf("%s: %q is not a quantity: write a number with a suffix, e.g. 8Gi or 512Mi", p, s)
					}
				}
				if w := walk(p, t[k]); w != "" {
					return w
				}
			}
		case []any:
			for i, c := range t {
				if w := walk(fmt.Sprintf("%s[%d]", path, i), c); w != "" {
					return w
				}
			}
		}
		return ""
	}
	return walk("", u)
}

// readAPIInput decodes every document as one of this API's kinds and refuses duplicates.
// A namespaced object (a Binding, a ModelDeployment) that names no namespace is in namespace, as
// kubectl apply -n would create it.
func readAPIInput(docs []document, namespace string) (*apiInput, error) {
	in := &apiInput{}
	seen := map[string]document{}
	for _, d := range docs {
		obj, kind, err := decodeAPIObject(d, namespace)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		key := schema.GroupKind{Group: kvv1.GroupVersion.Group, Kind: kind}.String() + " " + obj.GetNamespace() + "/" + obj.GetName()
		if prev, dup := seen[key]; dup {
			return nil, invalidErrorf("%s: %s %s is also defined at %s; keep one", d, kind, qualifiedName(obj), prev)
		}
		seen[key] = d
		obj.Default()
		switch o := obj.(type) {
		case *kvv1.KVCacheBackend:
			in.set.Backends = append(in.set.Backends, *o)
		case *kvv1.KVCachePool:
			in.set.Pools = append(in.set.Pools, *o)
		case *kvv1.KVCachePoolBinding:
			in.set.Bindings = append(in.set.Bindings, *o)
		case *kvv1.ModelDeployment:
			in.models = append(in.models, *o)
		case *kvv1.InstanceType:
			in.set.InstanceTypes = append(in.set.InstanceTypes, *o)
		case *kvv1.Setting:
			in.set.Settings = append(in.set.Settings, *o)
		}
	}
	return in, nil
}

// readClusterFiles reads the --cluster files: the objects a cluster already holds (none when no
// file is given).
func readClusterFiles(files []string, stdin io.Reader, namespace string) (*apiInput, error) {
	var docs []document
	if len(files) > 0 {
		var err error
		if docs, err = readInputs(files, stdin); err != nil {
			return nil, err
		}
	}
	return readAPIInput(docs, namespace)
}

func qualifiedName(o kvObject) string {
	if o.GetNamespace() != "" {
		return o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetName()
}

// fileOptions are what every CLI command assumes of the cluster its files stand for: a default
// chart install (the Setting catalog at its defaults) with stores in systemNamespace.
func fileOptions(systemNamespace string, r *generator.Renderer) objects.FileOptions {
	return objects.FileOptions{ChartSettings: true, SystemNamespace: systemNamespace, Defaults: r.Defaults()}
}
