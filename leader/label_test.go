package leader

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kvcache-operator/kvcache/vocab"
)

// startConfig is a launcher whose Pod patches fail with the errors given, in turn, and then
// succeed.
func startConfig(t *testing.T, errs ...error) (Config, *fake.Clientset, *int) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "leader-0", Labels: map[string]string{vocab.LabelStoreLeader: "true"}}}
	cs := fake.NewClientset(pod)
	calls := 0
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= len(errs) {
			return true, nil, errs[calls-1]
		}
		return false, nil, nil
	})
	return Config{Client: cs, PodNamespace: "ns", PodName: "leader-0", RetryPeriod: time.Millisecond, Log: logr.Discard()}, cs, &calls
}

// A launcher that starts while the API server is away (a control-plane restart) waits for it,
// then writes its standby label, instead of exiting into a crash loop.
func TestLabelAtStartWaitsForTheAPIServer(t *testing.T) {
	refusedConn := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	c, cs, calls := startConfig(t, refusedConn, refusedConn, apierrors.NewServiceUnavailable("starting"))
	require.NoError(t, c.labelAtStart(context.Background(), c.Log))
	assert.Equal(t, 4, *calls, "three failed attempts, then the write")
	p, err := cs.CoreV1().Pods("ns").Get(context.Background(), "leader-0", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "false", p.Labels[vocab.LabelStoreLeader])
}

// An answer that will not change (no right to patch Pods) is returned at once: the launcher
// exits naming it, rather than waiting forever.
func TestLabelAtStartReturnsARefusal(t *testing.T) {
	forbidden := apierrors.NewForbidden(corev1.Resource("pods"), "leader-0", errors.New("no patch"))
	c, _, calls := startConfig(t, forbidden)
	err := c.labelAtStart(context.Background(), c.Log)
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err))
	assert.Equal(t, 1, *calls)
}

// A launcher stopped while it waits returns at once.
func TestLabelAtStartEndsWithItsContext(t *testing.T) {
	refusedConn := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = refusedConn
	}
	c, _, calls := startConfig(t, errs...)
	c.RetryPeriod = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Error(t, c.labelAtStart(ctx, c.Log))
	assert.Equal(t, 1, *calls, "no retry once stopped")
}
