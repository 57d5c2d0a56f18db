package leader

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kvcache-operator/kvcache/vocab"
)

// labelTimeout bounds a label write on the way out, so an unreachable API server delays a
// stopping launcher by seconds at most (the next start writes "false" anyway).
const labelTimeout = 2 * time.Second

// writeLabel sets vocab.LabelStoreLeader on the launcher's Pod.
func (c Config) writeLabel(ctx context.Context, leading bool) error {
	if c.PodName == "" {
		return nil
	}
	return c.patchLabel(ctx, c.PodName, leading)
}

// patchLabel sets vocab.LabelStoreLeader on a Pod of the launcher's namespace. A JSON merge patch of
// the one label needs only the pods patch verb, and leaves every other label alone.
func (c Config) patchLabel(ctx context.Context, pod string, leading bool) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{vocab.LabelStoreLeader: strconv.FormatBool(leading)}}})
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Pods(c.PodNamespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// labelAtStart writes "false" before the campaign, retrying while the API server does not
// answer (a launcher restarted during a control-plane restart waits for it instead of exiting
// into a crash loop: it cannot campaign without the API anyway). An answer that refuses the
// write (no pods patch right, no such Pod) is returned: retrying cannot fix it.
func (c Config) labelAtStart(ctx context.Context, log logr.Logger) error {
	wait := c.RetryPeriod
	for {
		err := c.writeLabel(ctx, false)
		if err == nil || ctx.Err() != nil || refused(err) {
			return err
		}
		log.Error(err, "labelling the Pod as standby before campaigning; retrying", "pod", c.PodNamespace+"/"+c.PodName, "in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, maxStartRetry)
	}
}

// maxStartRetry caps the wait between the start's label attempts.
const maxStartRetry = 8 * time.Second

// refused: the API server answered and will answer the same again.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}

// labelLeading writes "true" until it succeeds or ctx ends: the master serves meanwhile, and a
// transient API error must not leave the leader unlabelled. Then it writes "false" on the
// previous holder's Pod (the holder identity names it): a Pod that died with its node cannot
// correct its own label, and would otherwise read "true" until it is deleted.
func (c Config) labelLeading(ctx context.Context, log logr.Logger, previous string) {
	if c.PodName == "" {
		return
	}
	for {
		err := c.writeLabel(ctx, true)
		if err == nil {
			log.Info("labelled the Pod as leader", "pod", c.PodNamespace+"/"+c.PodName, "label", vocab.LabelStoreLeader+"=true")
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Error(err, "labelling the Pod as leader; retrying", "pod", c.PodNamespace+"/"+c.PodName, "retryPeriod", c.RetryPeriod)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.RetryPeriod):
		}
	}
	if previous == "" || previous == c.PodName {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	switch err := c.patchLabel(pctx, previous, false); {
	case err == nil:
		log.Info("labelled the previous leader's Pod as standby", "pod", c.PodNamespace+"/"+previous, "label", vocab.LabelStoreLeader+"=false")
	case apierrors.IsNotFound(err):
		// Gone already, or the holder was not a Pod of this namespace.
	default:
		log.Error(err, "labelling the previous leader's Pod as standby", "pod", c.PodNamespace+"/"+previous)
	}
}

// labelStandby writes "false" on the way out, bounded by labelTimeout; a failure is logged,
// not returned, since the master is already stopped.
func (c Config) labelStandby(log logr.Logger) {
	if c.PodName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), labelTimeout)
	defer cancel()
	if err := c.writeLabel(ctx, false); err != nil {
		log.Error(err, "labelling the Pod as standby", "pod", c.PodNamespace+"/"+c.PodName)
	}
}
