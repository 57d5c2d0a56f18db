package check

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

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
}

// Offline reports what the admission webhooks would answer if the manifests were applied to a
// cluster holding cluster: every rule on each of this API's objects in creates and models, and
// the injection of every opted-in Pod, with the same messages and warnings.
// The Pods resolve against everything, the manifests' own objects included, as they would once
// applied.
func Offline(ctx context.Context, cluster, creates objects.Set, models []kvv1.ModelDeployment, pods []PodInput, inj *injection.Injector, o objects.FileOptions) (*Report, error) {
	r := &Report{}
	judged, err := rules.JudgeCreates(ctx, cluster, creates, models, o)
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
			r.pass("admission", object, "Admitted by every admission rule.")
		}
	}
	all := objects.NewFiles(cluster.Concat(creates), o)
	for _, p := range pods {
		if !injection.OptedIn(p.Pod) {
			continue
		}
		res, err := inj.Inject(ctx, p.Pod, p.Namespace, all)
		var rf *injection.Refusal
		switch {
		case errors.As(err, &rf):
			r.fail("injection", p.Object, sentence(rf.Message), "")
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

func engineName(id string) string {
	if e, ok := engines.ByID(id); ok {
		return e.Name
	}
	return id
}
