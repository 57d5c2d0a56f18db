package operator

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// AddFinalizer adds f to o and writes it with a merge patch under an optimistic lock. A merge
// patch replaces the whole finalizers list; the lock (o's resourceVersion in the patch) makes
// the API server refuse it with a Conflict when another actor changed the object since o was
// read, instead of dropping that actor's finalizer. The caller retries on a fresh read (a
// reconcile error requeues). On an error o is left as it was. It reports whether it wrote.
func AddFinalizer(ctx context.Context, c client.Client, o client.Object, f string) (bool, error) {
	if controllerutil.ContainsFinalizer(o, f) {
		return false, nil
	}
	before := o.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(o, f)
	if err := c.Patch(ctx, o, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		controllerutil.RemoveFinalizer(o, f)
		return false, err
	}
	return true, nil
}

// RemoveFinalizer removes f from o the same way (see AddFinalizer). It reports whether it
// wrote.
func RemoveFinalizer(ctx context.Context, c client.Client, o client.Object, f string) (bool, error) {
	if !controllerutil.ContainsFinalizer(o, f) {
		return false, nil
	}
	before := o.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(o, f)
	if err := c.Patch(ctx, o, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		o.SetFinalizers(before.GetFinalizers())
		return false, err
	}
	return true, nil
}
