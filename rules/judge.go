package rules

import (
	"context"
	"slices"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
)

// Judged is the verdict on one object of a set.
type Judged struct {
	Kind string
	// Name is namespace/name for a namespaced kind.
	Name    string
	Verdict Verdict
	// Update is true when the object was judged as an update of the one the cluster holds.
	Update bool
}

// Judge runs every rule on every object of a set as if each were created into a cluster that
// holds the rest (the view of `kvcache render`, which has no cluster). Only objects with errors
// or warnings are returned.
func Judge(ctx context.Context, set objects.Set, models []kvv1.ModelDeployment, o objects.FileOptions) ([]Judged, error) {
	all, err := JudgeApply(ctx, Apply{Manifests: set, Models: models, Options: o})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(j Judged) bool { return len(j.Verdict.Errors) == 0 && len(j.Verdict.Warnings) == 0 }), nil
}

// Apply is a set of manifests applied to a cluster: what `kvcache check -f` judges.
type Apply struct {
	// Cluster and ClusterModels are the objects the cluster already holds.
	Cluster       objects.Set
	ClusterModels []kvv1.ModelDeployment
	// Manifests and Models are applied to it.
	Manifests objects.Set
	Models    []kvv1.ModelDeployment
	Options   objects.FileOptions
	// Renderer, when set, renders a managed backend's store before and after an update for the
	// restarts the backend webhook warns of (Backend).
	Renderer *generator.Renderer
}

// Applied is the cluster once the manifests are applied: each manifest replaces the cluster's
// object of the same kind and name, in its place, and the others are added after the cluster's.
func (a Apply) Applied() objects.Set {
	m := a.asApplied()
	return objects.Set{
		Backends:      overlay(a.Cluster.Backends, m.Backends, backendKey),
		Pools:         overlay(a.Cluster.Pools, m.Pools, poolKey),
		Bindings:      overlay(a.Cluster.Bindings, m.Bindings, bindingKey),
		InstanceTypes: overlay(a.Cluster.InstanceTypes, m.InstanceTypes, func(t *kvv1.InstanceType) string { return t.Name }),
		Settings:      overlay(a.Cluster.Settings, m.Settings, settingKey),
	}
}

// asApplied is the manifests as the API server stores them over an object it holds: an apply
// changes neither the status (a subresource) nor a deletion under way, so a manifest of a held
// object keeps the held object's.
func (a Apply) asApplied() objects.Set {
	m := objects.Set{
		Backends: slices.Clone(a.Manifests.Backends), Pools: slices.Clone(a.Manifests.Pools),
		Bindings: slices.Clone(a.Manifests.Bindings), InstanceTypes: a.Manifests.InstanceTypes,
		Settings: a.Manifests.Settings,
	}
	for i := range m.Backends {
		if old := held(a.Cluster.Backends, backendKey(&m.Backends[i]), backendKey); old != nil {
			m.Backends[i].Status, m.Backends[i].DeletionTimestamp = old.Status, old.DeletionTimestamp
		}
	}
	for i := range m.Pools {
		if old := held(a.Cluster.Pools, poolKey(&m.Pools[i]), poolKey); old != nil {
			m.Pools[i].Status, m.Pools[i].DeletionTimestamp = old.Status, old.DeletionTimestamp
		}
	}
	for i := range m.Bindings {
		if old := held(a.Cluster.Bindings, bindingKey(&m.Bindings[i]), bindingKey); old != nil {
			m.Bindings[i].Status, m.Bindings[i].DeletionTimestamp = old.Status, old.DeletionTimestamp
		}
	}
	return m
}

func modelsAsApplied(cluster, models []kvv1.ModelDeployment) []kvv1.ModelDeployment {
	out := slices.Clone(models)
	for i := range out {
		if old := held(cluster, modelKey(&out[i]), modelKey); old != nil {
			out[i].Status, out[i].DeletionTimestamp = old.Status, old.DeletionTimestamp
		}
	}
	return out
}

func backendKey(b *kvv1.KVCacheBackend) string { return b.Name }

func poolKey(p *kvv1.KVCachePool) string { return p.Name }

func settingKey(s *kvv1.Setting) string { return s.Name }

func bindingKey(b *kvv1.KVCachePoolBinding) string { return b.Namespace + "/" + b.Name }

func modelKey(md *kvv1.ModelDeployment) string { return md.Namespace + "/" + md.Name }

// overlay is base with each item of over replacing base's item of the same key, in its place,
// and the rest of over appended.
func overlay[T any](base, over []T, key func(*T) string) []T {
	out := slices.Clone(base)
	for i := range over {
		k := key(&over[i])
		if j := slices.IndexFunc(out, func(x T) bool { return key(&x) == k }); j >= 0 && j < len(base) {
			out[j] = over[i]
			continue
		}
		out = append(out, over[i])
	}
	return out
}

// held finds the object of key k in the cluster: the old side of an update, nil for a create.
func held[T any](cluster []T, k string, key func(*T) string) *T {
	for i := range cluster {
		if key(&cluster[i]) == k {
			return &cluster[i]
		}
	}
	return nil
}

// JudgeApply judges each manifest as the admission webhooks answer `kubectl apply` of it: an
// object the cluster holds (same kind, namespace and name) as an update of that object, any
// other as a create. Lookups read the cluster as the manifests leave it (Applied), except that
// each Binding created is judged against the cluster's Bindings and the manifests' Bindings
// before it, as the webhook admits the first of two creates claiming one domain and refuses the
// second. Settings, backends, pools, Bindings, then ModelDeployments, in the order given; every
// manifest gets a Judged, with or without findings.
func JudgeApply(ctx context.Context, a Apply) ([]Judged, error) {
	applied, m := a.Applied(), a.asApplied()
	all := objects.NewFiles(applied, a.Options)
	var out []Judged
	add := func(kind, name string, v Verdict, update bool) {
		out = append(out, Judged{Kind: kind, Name: name, Verdict: v, Update: update})
	}
	for i := range m.Settings {
		s := &m.Settings[i]
		old := held(a.Cluster.Settings, s.Name, settingKey)
		add("Setting", s.Name, Setting(old, s), old != nil)
	}
	for i := range m.Backends {
		b := &m.Backends[i]
		old := held(a.Cluster.Backends, b.Name, backendKey)
		v, err := Backend(ctx, all, a.Renderer, old, b)
		if err != nil {
			return nil, err
		}
		add("KVCacheBackend", b.Name, v, old != nil)
	}
	for i := range m.Pools {
		p := &m.Pools[i]
		old := held(a.Cluster.Pools, p.Name, poolKey)
		v, err := Pool(ctx, all, old, p)
		if err != nil {
			return nil, err
		}
		add("KVCachePool", p.Name, v, old != nil)
	}
	for i := range m.Bindings {
		b := &m.Bindings[i]
		before := applied
		before.Bindings = overlay(a.Cluster.Bindings, m.Bindings[:i], bindingKey)
		old := held(a.Cluster.Bindings, bindingKey(b), bindingKey)
		v, err := Binding(ctx, objects.NewFiles(before, a.Options), old, b)
		if err != nil {
			return nil, err
		}
		add("KVCachePoolBinding", bindingKey(b), v, old != nil)
	}
	models := modelsAsApplied(a.ClusterModels, a.Models)
	for i := range models {
		md := &models[i]
		old := held(a.ClusterModels, modelKey(md), modelKey)
		v, err := ModelDeployment(ctx, all, old, md)
		if err != nil {
			return nil, err
		}
		add("ModelDeployment", modelKey(md), v, old != nil)
	}
	return out, nil
}
