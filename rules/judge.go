package rules

import (
	"context"
	"slices"

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
// holds the rest (the CLI's view of its files). Only objects with errors or warnings are
// returned.
func Judge(ctx context.Context, f *Files, models []kvv1.ModelDeployment) ([]Judged, error) {
	all, err := JudgeCreates(ctx, &Files{ChartSettings: f.ChartSettings}, f, models)
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
func JudgeCreates(ctx context.Context, cluster, creates *Files, models []kvv1.ModelDeployment) ([]Judged, error) {
	all := &Files{
		Backends:      slices.Concat(cluster.Backends, creates.Backends),
		PoolList:      slices.Concat(cluster.PoolList, creates.PoolList),
		BindingList:   slices.Concat(cluster.BindingList, creates.BindingList),
		InstanceTypes: slices.Concat(cluster.InstanceTypes, creates.InstanceTypes),
		Settings:      slices.Concat(cluster.Settings, creates.Settings),
		ChartSettings: creates.ChartSettings || cluster.ChartSettings,
	}
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
	for i := range creates.PoolList {
		v, err := Pool(ctx, all, nil, &creates.PoolList[i])
		if err != nil {
			return nil, err
		}
		add("KVCachePool", creates.PoolList[i].Name, v)
	}
	for i := range creates.BindingList {
		b := &creates.BindingList[i]
		before := *all
		before.BindingList = all.BindingList[:len(cluster.BindingList)+i]
		v, err := Binding(ctx, &before, nil, b)
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
