package rules

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/api/v1/validation"
	"github.com/kvcache-operator/kvcache/generator"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Backend judges a KVCacheBackend created (old nil) or updated, as the backend webhook answers:
// its spec's refusals and, on an update it admits, the restarts of the store's master or members
// the update causes (StoreRestarts) when r is set to render the store (nil: no restart
// warnings).
func Backend(ctx context.Context, o objects.Reader, r *generator.Renderer, old, obj *kvv1.KVCacheBackend) (Verdict, error) {
	v, err := backendSpec(ctx, o, old, obj)
	if err != nil || old == nil || len(v.Errors) > 0 || r == nil {
		return v, err
	}
	restarts, err := StoreRestarts(ctx, o, r, old, obj)
	if err != nil {
		return v, err
	}
	v.warn(restarts...)
	return v, nil
}

// backendSpec judges a backend's spec. An update that leaves spec unchanged (metadata only:
// labels, annotations, finalizers) is admitted without judging it again, so a controller can
// always remove its finalizer.
func backendSpec(ctx context.Context, o objects.Reader, old, obj *kvv1.KVCacheBackend) (Verdict, error) {
	var v Verdict
	old, b, unchanged := defaulted(old, obj, func(b *kvv1.KVCacheBackend) any { return b.Spec })
	if unchanged {
		return v, nil
	}
	image, err := objects.BackendImageSetting(ctx, o)
	if err != nil {
		return v, err
	}
	v.refuse(validation.ValidateBackend(b, validation.BackendContext{BackendImageSetting: image})...)
	if old == nil {
		return v, nil
	}
	v.refuse(validation.ValidateBackendUpdate(old, b)...)
	if om, nm := old.Spec.Connection.Managed, b.Spec.Connection.Managed; om != nil && nm != nil &&
		om.Leader.MultiTenancyEnabled() && !nm.Leader.MultiTenancyEnabled() {
		pools, err := objects.PoolsOn(ctx, o, b.Name)
		if err != nil {
			return v, err
		}
		if len(pools) > 0 {
			v.refuse(field.Forbidden(field.NewPath("spec", "connection", "managed", "leader", "multiTenancy"), multiTenancyOffMessage(pools)))
		}
	}
	return v, nil
}

func multiTenancyOffMessage(pools []kvv1.KVCachePool) string {
	if len(pools) == 1 {
		return fmt.Sprintf("KVCachePool %s uses this backend and its Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete the pool first, or keep multiTenancy: true", pools[0].Name)
	}
	return fmt.Sprintf("KVCachePools %s use this backend and their Bindings' tenants live in the ledger; turning multi-tenancy off drops the ledger, so no ceiling would be enforced and every write would land in the store's default tenant; delete those pools first, or keep multiTenancy: true", strings.Join(poolNames(pools), ", "))
}

func poolNames(pools []kvv1.KVCachePool) []string {
	out := make([]string, len(pools))
	for i := range pools {
		out[i] = pools[i].Name
	}
	return out
}

// StoreRestarts says, for an update of a managed backend, which of its store's Pods the change
// replaces and what that does to the cache, so the user reads it before it happens: a changed
// leader Pod template restarts the master (one graceful handover with standbys, a restart with
// one replica), and a master starts empty; a changed member group's Pods are replaced one at a
// time, each draining its objects to the other members first. The store is rendered from the
// old and the new spec by the same renderer, so only what the spec changes counts (what a new
// operator version changes waits: spec.connection.managed.operatorUpdates).
func StoreRestarts(ctx context.Context, o objects.Reader, r *generator.Renderer, old, obj *kvv1.KVCacheBackend) ([]string, error) {
	if old == nil || old.Spec.Connection.Managed == nil || obj.Spec.Connection.Managed == nil {
		return nil, nil
	}
	before, after := old.DeepCopy(), obj.DeepCopy()
	before.Default()
	after.Default()
	hashes := func(b *kvv1.KVCacheBackend) (map[string]string, error) {
		in, err := objects.StoreInput(ctx, o, b, objects.OnBackend{}, objects.StoreOptions{})
		if err != nil {
			return nil, err
		}
		objs, err := r.RenderStore(in)
		if err != nil {
			return nil, nil //nolint:nilerr // a spec that does not render is refused by the rules, not here
		}
		out := map[string]string{}
		for _, x := range objs {
			switch w := x.(type) {
			case *appsv1.Deployment:
				out[w.Name] = w.Spec.Template.Labels[vocab.LabelPodSpecHash]
			case *appsv1.DaemonSet:
				out[w.Name] = w.Spec.Template.Labels[vocab.LabelPodSpecHash]
			}
		}
		return out, nil
	}
	was, err := hashes(before)
	if err != nil || was == nil {
		return nil, err
	}
	now, err := hashes(after)
	if err != nil || now == nil {
		return nil, err
	}
	var warnings []string
	leader := generator.LeaderName(obj.Name)
	wasWarm, nowWarm := before.Spec.Connection.Managed.Leader.Warm(), after.Spec.Connection.Managed.Leader.Warm()
	if h, ok := was[leader]; ok && now[leader] != "" && h != now[leader] {
		n := after.Spec.Connection.Managed.Leader.ReplicaCount()
		switch {
		case wasWarm && nowWarm && n > 1:
			warnings = append(warnings, fmt.Sprintf("this change restarts the store's masters (the leader's Pod template changes): the %d leader replicas are replaced standbys first, then the serving leader hands over once to an updated standby, which replays the operation log and keeps the cache; the store serves no request for about 10 s while the leadership moves", n))
		case wasWarm && nowWarm:
			warnings = append(warnings, "this change restarts the store's master (the leader's Pod template changes): with one leader replica the master stops and the new one replays the operation log, so the cache stays, but the store is unavailable until it serves (with leader.replicas: 3 a standby takes over instead)")
		case wasWarm != nowWarm:
			warnings = append(warnings, fmt.Sprintf("this change moves the store between warm failover (electionBackend: Etcd) and the Lease: every master restarts and the new one starts with an empty index, so the cache is cold: every object cached on KVCacheBackend %s misses afterwards", obj.Name))
		case n > 1:
			warnings = append(warnings, fmt.Sprintf("this change restarts the store's master (the leader's Pod template changes): the %d leader replicas are replaced standbys first, then the serving leader hands over once, gracefully, to an updated standby; the master that takes over starts empty, so the cache is cold: every object cached on KVCacheBackend %s misses afterwards", n, obj.Name))
		default:
			warnings = append(warnings, fmt.Sprintf("this change restarts the store's master (the leader's Pod template changes): with one leader replica the master stops and starts empty, so the store is unavailable for seconds and the cache is cold: every object cached on KVCacheBackend %s misses afterwards (with leader.replicas: 3 it would be one graceful handover)", obj.Name))
		}
	}
	om, nm := before.Spec.Connection.Managed.Members, after.Spec.Connection.Managed.Members
	for i := range om {
		name := generator.MemberName(obj.Name, i)
		switch {
		case i >= len(nm):
			warnings = append(warnings, fmt.Sprintf("member group %d is removed: its members stop, each first draining its objects to the remaining members (moved, not lost, while they have room)", i))
		case was[name] != now[name]:
			warnings = append(warnings, fmt.Sprintf("this change replaces the members of group %d (their Pod template changes), one at a time: each drains its objects to the other members first, so they are moved, not lost, while the others have room", i))
		case !equality.Semantic.DeepEqual(om[i].NodeSelector, nm[i].NodeSelector):
			warnings = append(warnings, fmt.Sprintf("member group %d's nodeSelector changes: members on nodes it no longer selects stop, each first draining its objects to the other members", i))
		}
	}
	return warnings, nil
}
