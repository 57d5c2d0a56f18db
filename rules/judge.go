package rules

import (
	"context"
	"slices"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/objects"
)

// Judged is the verdict on one object of a set.
type Judged struct {
	Kind string
	// Name is namespace/name for a namespaced kind.
	Name    string
	Verdict Verdict
}

// Judge runs every rule on every object of a set as if each were created into a cluster that
// holds the rest (the CLI's view of its files). Only objects with errors or warnings are
// returned.
func Judge(ctx context.Context, set objects.Set, models []kvv1.ModelDeployment, o objects.FileOptions) ([]Judged, error) {
	all, err := JudgeCreates(ctx, objects.Set{}, set, models, o)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(j Judged) bool { return len(j.Verdict.Errors) == 0 && len(j.Verdict.Warnings) == 0 }), nil
}

// JudgeCreates judges each object of creates as created into a cluster holding cluster and the
// rest of creates: Settings, backends, pools, Bindings (each against the cluster's and the
// Bindings created before it, as the webhook admits the first of two creates claiming one
// domain and refuses the second), then ModelDeployments, in the order given. Every object of
// creates gets a Judged, with or without findings.
func JudgeCreates(ctx context.Context, cluster, creates objects.Set, models []kvv1.ModelDeployment, o objects.FileOptions) ([]Judged, error) {
	everything := cluster.Concat(creates)
	all := objects.NewFiles(everything, o)
	var out []Judged
	add := func(kind, name string, v Verdict) { out = append(out, Judged{Kind: kind, Name: name, Verdict: v}) }
	for i := range creates.Settings {
		add("Setting", creates.Settings[i].Name, Setting(nil, &creates.Settings[i]))
	}
	for i := range creates.Backends {
		v, err := Backend(ctx, all, nil, &creates.Backends[i])
		if err != nil {
			return nil, err
		}
		add("KVCacheBackend", creates.Backends[i].Name, v)
	}
	for i := range creates.Pools {
		v, err := Pool(ctx, all, nil, &creates.Pools[i])
		if err != nil {
			return nil, err
		}
		add("KVCachePool", creates.Pools[i].Name, v)
	}
	for i := range creates.Bindings {
		b := &creates.Bindings[i]
		before := everything
		before.Bindings = everything.Bindings[:len(cluster.Bindings)+i]
		v, err := Binding(ctx, objects.NewFiles(before, o), nil, b)
		if err != nil {
			return nil, err
		}
		add("KVCachePoolBinding", b.Namespace+"/"+b.Name, v)
	}
	for i := range models {
		md := &models[i]
		v, err := ModelDeployment(ctx, all, nil, md)
		if err != nil {
			return nil, err
		}
		add("ModelDeployment", md.Namespace+"/"+md.Name, v)
	}
	return out, nil
}
