package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// A manager started during a control-plane restart waits until the API server answers.
func TestWaitForAPIServerWaitsUntilItAnswers(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	defer srv.Close()
	require.NoError(t, WaitForAPIServer(context.Background(), &rest.Config{Host: srv.URL}, logr.Discard(), time.Millisecond))
	assert.Equal(t, int32(3), calls.Load())
}

// Stopped while it waits, it says so.
func TestWaitForAPIServerEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := WaitForAPIServer(ctx, &rest.Config{Host: "http://127.0.0.1:1"}, logr.Discard(), time.Hour)
	assert.ErrorIs(t, err, context.Canceled)
}
