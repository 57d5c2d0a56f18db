package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// served runs watchServed on a Pod for up to d and returns the reason it gave, if any.
func served(t *testing.T, pod *corev1.Pod, failing bool, d time.Duration) string {
	t.Helper()
	var cs *fake.Clientset
	if pod != nil {
		cs = fake.NewClientset(pod)
	} else {
		cs = fake.NewClientset()
	}
	if failing {
		cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("connection refused")
		})
	}
	c := Config{Client: cs, PodNamespace: "ns", PodName: "leader-0", UnservedGrace: 90 * time.Millisecond}
	out := make(chan string, 1)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); c.watchServed(ctx, time.Now(), out) }()
	select {
	case r := <-out:
		<-done
		return r
	case <-done:
		return ""
	}
}

func ownPod(ready *corev1.ConditionStatus, deleting bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "leader-0"}}
	if ready != nil {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: *ready}}
	}
	if deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Finalizers = []string{"example.com/hold"}
	}
	return p
}

func TestALeaderHandsOverWhenItsPodIsNotServed(t *testing.T) {
	f, tr := corev1.ConditionFalse, corev1.ConditionTrue
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		failing bool
		want    string
	}{
		{"a Pod that reads Ready=False for the grace is not routed to", ownPod(&f, false), false, "its Pod has read Ready=False for"},
		{"a Ready Pod is served", ownPod(&tr, false), false, ""},
		{"a Pod nothing reports on (no Ready condition) is no reason", ownPod(nil, false), false, ""},
		{"a Pod being deleted hands over at once (its kubelet may be gone)", ownPod(&tr, true), false, "its Pod is being deleted"},
		{"a Pod that is gone hands over at once", nil, false, "its Pod is gone"},
		{"an API server that does not answer is no reason", ownPod(&f, false), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := served(t, tc.pod, tc.failing, 400*time.Millisecond)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
		})
	}
}
