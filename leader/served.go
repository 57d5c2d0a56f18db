package leader

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrSteppedDown is returned when the launcher handed over by itself: its Pod was not served
// (not Ready for UnservedGrace, or being deleted). The master was stopped and the Lease released.
var ErrSteppedDown = fmt.Errorf("handed over")

// servedPeriod is how often the leading launcher reads its own Pod.
const servedPeriod = 5 * time.Second

// watchServed reads the launcher's own Pod while it leads and sends, once, why the term should
// end: the Pod is being deleted or is gone (the kubelet that would stop this container may
// itself be gone), or it has read Ready=False for UnservedGrace since the term began or it was
// last Ready. A read that fails says nothing (an API server outage is not a reason), nor does a
// Pod without a Ready condition (nothing reports on it).
func (c Config) watchServed(ctx context.Context, began time.Time, out chan<- string) {
	if c.PodName == "" || c.UnservedGrace <= 0 {
		return
	}
	period := min(servedPeriod, c.UnservedGrace/3)
	tick := time.NewTicker(period)
	defer tick.Stop()
	lastServed := began
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, labelTimeout)
		pod, err := c.Client.CoreV1().Pods(c.PodNamespace).Get(rctx, c.PodName, metav1.GetOptions{})
		cancel()
		reason := ""
		switch {
		case apierrors.IsNotFound(err):
			reason = "its Pod is gone"
		case err != nil:
			continue
		case pod.DeletionTimestamp != nil:
			reason = "its Pod is being deleted"
		default:
			ready, known := podReady(pod)
			if !known || ready {
				lastServed = time.Now()
				continue
			}
			if unserved := time.Since(lastServed); unserved >= c.UnservedGrace {
				reason = fmt.Sprintf("its Pod has read Ready=False for %s: the leader Service does not route to this master", unserved.Round(time.Second))
			}
		}
		if reason == "" {
			continue
		}
		select {
		case out <- reason:
		case <-ctx.Done():
		}
		return
	}
}

// podReady is the Pod's Ready condition, and whether it has one.
func podReady(p *corev1.Pod) (ready, known bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, true
		}
	}
	return false, false
}
