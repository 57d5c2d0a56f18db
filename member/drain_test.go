package member

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/store"
)

// How a finished job reads: SUCCEEDED is a drain only when no unit failed.
func TestClassify(t *testing.T) {
	cases := []struct {
		name     string
		job      store.DrainJob
		result   Result
		notMoved int64
	}{
		{"succeeded", store.DrainJob{Status: store.DrainSucceeded, SucceededUnits: 40, MigratedBytes: 40 << 20}, ResultDrained, 0},
		{"succeeded with failed units: the member died mid-drain", store.DrainJob{Status: store.DrainSucceeded, SucceededUnits: 8, FailedUnits: 2, MigratedBytes: 8 << 20}, ResultSucceededWithFailures, 32 << 20},
		{"failed: no room", store.DrainJob{Status: store.DrainFailed, SucceededUnits: 8, FailedUnits: 12, MigratedBytes: 8 << 22, Message: "Drain job failed: unrecoverable units remain"}, ResultPartial, 40<<20 - 8<<22},
		{"canceled", store.DrainJob{Status: store.DrainCanceled}, ResultCanceled, 40 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := classify(Outcome{BytesAtStart: 40 << 20, Job: tc.job})
			assert.Equal(t, tc.result, o.Result)
			assert.Equal(t, tc.notMoved, o.BytesNotMoved())
			assert.NotEmpty(t, o.Message)
		})
	}
	o := classify(Outcome{BytesAtStart: 10 << 20, Job: store.DrainJob{Status: store.DrainSucceeded, SucceededUnits: 8, FailedUnits: 2, MigratedBytes: 8 << 20}})
	assert.Equal(t, "the master reports SUCCEEDED, but 2 units failed: those objects did not move and are lost when this member stops", o.Message)
	o = classify(Outcome{BytesAtStart: 48 << 20, Job: store.DrainJob{Status: store.DrainFailed, SucceededUnits: 8, FailedUnits: 12, MigratedBytes: 32 << 20, Message: "Drain job failed: unrecoverable units remain"}})
	assert.Equal(t, "the drain FAILED (Drain job failed: unrecoverable units remain): 8 units moved, and the rest (12 failed attempts) did not, most likely for lack of room on the other members; what did not move is lost when this member stops", o.Message)
	assert.Equal(t, int64(16<<20), o.BytesNotMoved())
}

// Only failures to reach the master are retried; whatever it answered, an error included, ends
// the drain at once.
func TestUnreachable(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := closed.Addr().String()
	require.NoError(t, closed.Close())
	_, refused := store.New("http://" + addr).Segments(context.Background())
	_, unresolvable := store.New("http://nowhere.invalid:9003").Segments(context.Background())
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"no such host", unresolvable, true},
		{"the client's timeout", fmt.Errorf("GET /get_segments_detail: %w", context.DeadlineExceeded), true},
		{"reset mid-answer", fmt.Errorf("GET /metrics: reading the body: %w", io.ErrUnexpectedEOF), true},
		{"an answer with an error code", &store.Error{Op: "POST /api/v1/drain_jobs", HTTPStatus: 409, Code: store.CodeUnavailableInStatus}, false},
		{"a master without the segment listing", fmt.Errorf("GET /get_segments_detail: HTTP 404: %w", store.ErrNotSupported), false},
		{"an answer too large", fmt.Errorf("GET /get_segments_detail: %w of 4194304 bytes", store.ErrBodyTooLarge), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.err)
			assert.Equal(t, tc.want, unreachable(tc.err), "%v", tc.err)
		})
	}
}
