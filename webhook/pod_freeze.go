package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kvcache-operator/kvcache/injection"
	"github.com/kvcache-operator/kvcache/vocab"
)

// PodFreeze refuses updates that would change what injection decided for a live Pod: the
// opt-in state, the injection record and the projected client configuration; and the same keys
// on the Pods rendered for a ModelDeployment, which carry the configuration without the opt-in
// label. Injection runs at
// CREATE only, so a label added later would claim a cache the Pod does not have, an edited record
// would describe a decision nobody made, and an edited client-config would swap the master
// address under a running container (the kubelet keeps reprojecting the file, through the
// termination grace period too). Everything else, finalizers included, is left alone.
//
// It is evaluated on terminating Pods as well: it is a plain handler, not a typed validator, so
// nothing skips updates of objects being deleted.
type PodFreeze struct {
	decoder admission.Decoder
}

// NewPodFreeze returns the handler.
func NewPodFreeze(decoder admission.Decoder) *PodFreeze { return &PodFreeze{decoder: decoder} }

// Handle implements admission.Handler.
func (f *PodFreeze) Handle(ctx context.Context, req admission.Request) admission.Response {
	return f.Admit(ctx, req).Response
}

// Admit decides one request and says why.
func (f *PodFreeze) Admit(_ context.Context, req admission.Request) Outcome {
	if req.Operation != admissionv1.Update {
		return admitted(admission.Allowed(""))
	}
	oldPod, newPod := &corev1.Pod{}, &corev1.Pod{}
	if err := f.decoder.DecodeRaw(req.OldObject, oldPod); err != nil {
		return errored(http.StatusBadRequest, err, "DecodeError")
	}
	if err := f.decoder.DecodeRaw(req.Object, newPod); err != nil {
		return errored(http.StatusBadRequest, err, "DecodeError")
	}
	faults := FreezeFaults(oldPod, newPod)
	if len(faults) == 0 {
		return admitted(admission.Allowed(""))
	}
	return refused(strings.Join(faults, "; "), "Frozen")
}

// FreezeFaults lists every frozen key an update changes, all at once.
func FreezeFaults(oldPod, newPod *corev1.Pod) []string {
	var faults []string
	if was, is := injection.OptedIn(oldPod), injection.OptedIn(newPod); was != is {
		faults = append(faults, fmt.Sprintf("label %s changes the Pod's opt-in state (%q to %q), which is fixed at creation because injection runs only then; change the workload's Pod template instead, and the change takes effect when the workload rolls",
			vocab.LabelInject, oldPod.Labels[vocab.LabelInject], newPod.Labels[vocab.LabelInject]))
	}
	if was, is := oldPod.Labels[vocab.LabelModelDeployment], newPod.Labels[vocab.LabelModelDeployment]; was != is {
		faults = append(faults, fmt.Sprintf("label %s names the ModelDeployment the Pod was rendered for (%q to %q) and holds its configuration frozen; it is fixed at creation, so change the ModelDeployment instead and its Pods roll",
			vocab.LabelModelDeployment, was, is))
	}
	for _, k := range []struct{ key, why string }{
		{vocab.AnnotationInjected, "it records what injection decided at creation"},
		{vocab.AnnotationClientConfig, "the running container reads it through a projected file, so an edit would swap the store address, transport or segment sizes under it"},
	} {
		o, hadOld := oldPod.Annotations[k.key]
		n, hasNew := newPod.Annotations[k.key]
		switch {
		case hadOld && !hasNew:
			faults = append(faults, fmt.Sprintf("annotation %s may not be removed: %s", k.key, k.why))
		case !hadOld && hasNew:
			faults = append(faults, fmt.Sprintf("annotation %s may not be added: %s", k.key, k.why))
		case o != n:
			faults = append(faults, fmt.Sprintf("annotation %s may not be edited: %s", k.key, k.why))
		}
	}
	return faults
}
