package check

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvv1 "github.com/kvcache-operator/kvcache/api/v1"
	"github.com/kvcache-operator/kvcache/engines"
	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/objects"
	"github.com/kvcache-operator/kvcache/rules"
)

// PodInput is a Pod, or a workload's Pod template, from a manifest.
type PodInput struct {
	// Object names the manifest's object: Deployment/team-a/chat.
	Object    string
	Namespace string
	Pod       *corev1.Pod
	// Misplaced says why a workload that carries the opt-in on its own metadata is not injected
	// (injection.Misplaced); "" otherwise.
	Misplaced string
}

// Offline reports what the admission webhooks would answer if the manifests were applied to a
// cluster holding a.Cluster: every rule on each of this API's objects in the manifests, judged as
// an update of the object the cluster holds under the same kind and name and as a create
// otherwise, and the injection of every opted-in Pod, with the same messages and warnings. A
// Pod that carries the contract's annotations but an inject label admission never sees
// (injection.LeftAlone) fails. The Pods resolve against the cluster as the manifests leave it.
// missing is added to the finding of a Pod whose Binding, pool or backend neither the manifests
// nor the cluster's objects hold: where those were read from files, what to pass ("" for none).
func Offline(ctx context.Context, a rules.Apply, pods []PodInput, inj *injection.Injector, missing string) (*Report, error) {
	r := &Report{}
	judged, err := rules.JudgeApply(ctx, a)
	if err != nil {
		return nil, err
	}
	for _, j := range judged {
		object := j.Kind + "/" + j.Name
		for _, e := range j.Verdict.Errors {
			r.fail("admission", object, sentence(e.Error()), "")
		}
		for _, w := range j.Verdict.Warnings {
			r.warn("admission", object, sentence(w), "")
		}
		if len(j.Verdict.Errors) == 0 && len(j.Verdict.Warnings) == 0 {
			msg := "Admitted by every admission rule."
			if j.Update {
				msg = "Admitted by every admission rule, as an update of the object the cluster holds."
			}
			r.pass("admission", object, msg)
		}
	}
	all := objects.NewFiles(a.Applied(), a.Options)
	for _, p := range pods {
		if !injection.OptedIn(p.Pod) {
			if w := p.Misplaced; w != "" {
				r.fail("injection", p.Object, sentence(w), "")
			} else if w := injection.LeftAlone(p.Pod); w != "" {
				r.fail("injection", p.Object, sentence(w), "")
			} else if w := injection.Unlabelled(p.Pod); w != "" {
				r.warn("injection", p.Object, sentence(w), "")
			}
			continue
		}
		res, err := inj.Inject(ctx, p.Pod, p.Namespace, all)
		var rf *injection.Refusal
		switch {
		case errors.As(err, &rf):
			msg := rf.Message
			if rf.ObjectMissing() && missing != "" {
				msg += "; " + missing
			}
			r.fail("injection", p.Object, sentence(msg), "")
			continue
		case err != nil:
			return nil, err
		}
		for _, w := range res.Warnings {
			r.warn("injection", p.Object, sentence(w), "")
		}
		rec := res.Record
		r.pass("injection", p.Object, fmt.Sprintf("Injected for %s through KVCachePoolBinding %s (%s vehicle, tenant %s).", engineName(rec.Engine), rec.Binding, rec.Vehicle, rec.Domain))
	}
	return r, nil
}

// Held reads the objects of this API a cluster holds, as --cluster files would give them: every
// backend, pool, Binding (all namespaces), InstanceType, Setting and ModelDeployment, each
// defaulted as the API server defaults it.
func Held(ctx context.Context, c client.Reader) (objects.Set, []kvv1.ModelDeployment, error) {
	var set objects.Set
	backends, pools, bindings := &kvv1.KVCacheBackendList{}, &kvv1.KVCachePoolList{}, &kvv1.KVCachePoolBindingList{}
	types, settings, models := &kvv1.InstanceTypeList{}, &kvv1.SettingList{}, &kvv1.ModelDeploymentList{}
	for _, l := range []client.ObjectList{backends, pools, bindings, types, settings, models} {
		if err := c.List(ctx, l); err != nil {
			return set, nil, fmt.Errorf("read the cluster's %T: %w", l, err)
		}
	}
	for i := range backends.Items {
		backends.Items[i].Default()
	}
	for i := range pools.Items {
		pools.Items[i].Default()
	}
	for i := range bindings.Items {
		bindings.Items[i].Default()
	}
	for i := range types.Items {
		types.Items[i].Default()
	}
	for i := range settings.Items {
		settings.Items[i].Default()
	}
	for i := range models.Items {
		models.Items[i].Default()
	}
	set = objects.Set{Backends: backends.Items, Pools: pools.Items, Bindings: bindings.Items, InstanceTypes: types.Items, Settings: settings.Items}
	return set, models.Items, nil
}

func engineName(id string) string {
	if e, ok := engines.ByID(id); ok {
		return e.Name
	}
	return id
}
