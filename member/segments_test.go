package member

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/operator/store"
)

func TestSplitSegmentName(t *testing.T) {
	cases := []struct {
		name, host string
		port       int
		ok         bool
	}{
		{"10.0.0.7:13001", "10.0.0.7", 13001, true},
		{"fd00::7:13001", "fd00::7", 13001, true},
		{"[fd00::7]:13001", "fd00::7", 13001, true},
		{"node-1.example:12300", "node-1.example", 12300, true},
		{"10.0.0.7", "", 0, false},
		{"10.0.0.7:", "", 0, false},
		{"10.0.0.7:x", "", 0, false},
		{"10.0.0.7:70000", "", 0, false},
		{":13001", "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host, port, ok := splitSegmentName(tc.name)
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.host, host)
				assert.Equal(t, tc.port, port)
			}
		})
	}
}

func TestOwnSegments(t *testing.T) {
	segs := []store.Segment{
		{Name: "10.0.0.7:13001", TEEndpoint: "10.0.0.7:15001"}, {Name: "10.0.0.70:13001", TEEndpoint: "10.0.0.70:15002"},
		{Name: "10.0.0.7:14002", TEEndpoint: "10.0.0.7:16002"}, {Name: "10.0.0.8:13001", TEEndpoint: "10.0.0.8:15001"},
		{Name: "fd00::7:12999", TEEndpoint: "fd00::7:15999"}, {Name: "garbage"},
	}
	cases := []struct {
		name        string
		podIP       string
		ports       map[int]bool
		own, others []string
	}{
		{"the Pod's IP, every port", "10.0.0.7", nil,
			[]string{"10.0.0.7:13001", "10.0.0.7:14002"},
			[]string{"10.0.0.70:13001", "10.0.0.8:13001", "fd00::7:12999", "garbage"}},
		{"a shared IP told apart by the member's ports (te_endpoint's)", "10.0.0.7", map[int]bool{16002: true, 13001: true, 40000: true},
			[]string{"10.0.0.7:14002"},
			[]string{"10.0.0.7:13001", "10.0.0.70:13001", "10.0.0.8:13001", "fd00::7:12999", "garbage"}},
		{"an IPv6 Pod IP in another spelling", "fd00:0::7", nil,
			[]string{"fd00::7:12999"},
			[]string{"10.0.0.7:13001", "10.0.0.70:13001", "10.0.0.7:14002", "10.0.0.8:13001", "garbage"}},
		{"no segment of this Pod", "10.0.0.9", nil,
			nil,
			[]string{"10.0.0.7:13001", "10.0.0.70:13001", "10.0.0.7:14002", "10.0.0.8:13001", "fd00::7:12999", "garbage"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			own, others := ownSegments(segs, tc.podIP, tc.ports)
			if tc.own == nil {
				assert.Empty(t, own)
			} else {
				assert.Equal(t, tc.own, names(own))
			}
			assert.Equal(t, tc.others, names(others))
		})
	}
}

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
