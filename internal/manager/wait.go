package manager

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// maxAPIWait caps the wait between two tries to reach the API server at start.
const maxAPIWait = 8 * time.Second

// WaitForAPIServer returns once the API server answers discovery, or when ctx ends. A manager
// started while the control plane restarts waits for it instead of exiting: building the
// manager reads discovery, and a replica that exited would sit in CrashLoopBackOff's growing
// delay after the API server is back, serving no admission.
func WaitForAPIServer(ctx context.Context, cfg *rest.Config, log logr.Logger, first time.Duration) error {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	wait := first
	for {
		_, err := dc.ServerVersion()
		if err == nil {
			return nil
		}
		log.Info("the API server does not answer yet; waiting", "error", err.Error(), "retryIn", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, maxAPIWait)
	}
}
