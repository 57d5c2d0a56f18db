package rules

import (
	"context"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
)

// Judged is the verdict on one object of a set.
type Judged struct {
	Kind string
	// Name is namespace/name for a namespaced kind.
	Name    string
	Verdict Verdict
}

// Judge runs every rule on every object of a set as if each were created into a cluster that
// holds the rest (the CLI's view of its files): Settings, backends, pools, Bindings (each
// against the Bindings before it), then ModelDeployments, in the order given. Only objects with
// errors or warnings are returned.
func Judge(ctx context.Context, f *Files, models []kvv1.ModelDeployment) ([]Judged, error) {
	var out []Judged
	add := func(kind, name string, v Verdict) {
		if len(v.Errors) > 0 || len(v.Warnings) > 0 {
			out = append(out, Judged{Kind: kind, Name: name, Verdict: v})
		}
	}
	for i := range f.Settings {
		add("Setting", f.Settings[i].Name, Setting(nil, &f.Settings[i]))
	}
	for i := range f.Backends {
		v, err := Backend(ctx, f, nil, &f.Backends[i])
		if err != nil {
			return nil, err
		}
		add("KVCacheBackend", f.Backends[i].Name, v)
	}
	for i := range f.PoolList {
		v, err := Pool(ctx, f, nil, &f.PoolList[i])
		if err != nil {
			return nil, err
		}
		add("KVCachePool", f.PoolList[i].Name, v)
	}
	for i := range f.BindingList {
		b := &f.BindingList[i]
		// Bindings are created in the order given: a domain is held by the first to claim it,
		// as the webhook admits the first of two creates and refuses the second.
		before := *f
		before.BindingList = f.BindingList[:i]
		v, err := Binding(ctx, &before, nil, b)
		if err != nil {
			return nil, err
		}
		add("KVCachePoolBinding", b.Namespace+"/"+b.Name, v)
	}
	for i := range models {
		md := &models[i]
		v, err := ModelDeployment(ctx, f, nil, md)
		if err != nil {
			return nil, err
		}
		add("ModelDeployment", md.Namespace+"/"+md.Name, v)
	}
	return out, nil
}
