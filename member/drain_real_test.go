//go:build linux && realstore

// Built with -tags realstore (make test does): the tests install the real store from PyPI through
// hack/mooncake.sh, which make test-unit leaves out.

// Drain against the REAL mooncake_master, members (mc_store_rest_server) and the store's Python
// client from PyPI's mooncake-transfer-engine-non-cuda wheel, provided by hack/mooncake.sh.
// Members register on distinct loopback addresses, standing in for Pods with their own IPs.

package member

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/store"
)

// lines collects the drain's JSON lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// events decodes every line; a line that is not one JSON object fails the test.
func (l *lines) events(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &e), "not a JSON line: %q", line)
		out = append(out, e)
	}
	return out
}

func msgs(events []map[string]any) []string {
	var out []string
	for _, e := range events {
		out = append(out, e["msg"].(string))
	}
	return out
}

func logger(l *lines) *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// The member process listens on its segment's te_endpoint port (and not on the port in the
// segment's name).
func TestListeningPortsHoldTheEndpoint(t *testing.T) {
	bin := mooncaketest.Bin(t)
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{})
	a, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 64<<20)
	ports, err := ListeningPorts(a.Pid())
	require.NoError(t, err)
	segs, err := store.New(m.Admin).Segments(context.Background())
	require.NoError(t, err)
	require.Len(t, segs, 1)
	_, te, ok := store.SplitSegmentName(segs[0].TEEndpoint)
	require.True(t, ok, segs[0].TEEndpoint)
	assert.True(t, ports[te], "te_endpoint %s, member A listens on %v", segs[0].TEEndpoint, ports)
	_, named, _ := store.SplitSegmentName(segA)
	assert.False(t, ports[named], "the port in the name %s is not listened on", segA)
}

// N objects spread over two members; member A's drain moves all of its own to B, and after
// A's SIGTERM (what the kubelet sends once the hook returns) all N read back byte for byte.
func TestDrainMovesEveryObject(t *testing.T) {
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{Tenants: []string{"team-a"}})
	a, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 128<<20)
	_, segB := mooncaketest.StartMember(t, bin, m, "member B", "127.0.0.3", 128<<20)
	admin := store.New(m.Admin, store.WithTimeout(2*time.Second))

	const n, size = 64, 1 << 20
	keys := mooncaketest.Keys("obj", n)
	client := mooncaketest.StartClient(t, bin, m, "team-a")
	client.Put(t, keys, size)
	ports, err := ListeningPorts(a.Pid())
	require.NoError(t, err)

	var log lines
	start := time.Now()
	o := Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Ports: ports, Deadline: 2 * time.Minute, Log: logger(&log)})
	took := time.Since(start)
	t.Logf("drain of member A: %s, %d units (%d bytes) in %s, %.1f objects/s; log:\n%s", o.Result, o.Job.SucceededUnits, o.Job.MigratedBytes,
		took.Round(time.Millisecond), float64(o.Job.SucceededUnits)/took.Seconds(), log.buf.String())
	require.Equal(t, ResultDrained, o.Result, "%+v", o)
	assert.Equal(t, []string{segA}, o.Segments)
	assert.Equal(t, []string{segB}, o.Targets)
	assert.Positive(t, o.BytesAtStart)
	assert.Less(t, o.BytesAtStart, int64(n*size), "the objects were spread over both members")
	assert.Equal(t, o.BytesAtStart, o.Job.MigratedBytes)
	assert.Zero(t, o.BytesNotMoved())

	events := log.events(t)
	got := msgs(events)
	assert.Equal(t, []string{"drain-starting", "drain-created"}, got[:2])
	assert.Contains(t, got, "drain-status")
	final := events[len(events)-1]
	assert.Equal(t, "drain-done", final["msg"])
	assert.Equal(t, "INFO", final["level"])
	assert.Equal(t, "drained", final["result"])
	assert.Equal(t, "SUCCEEDED", final["status"])
	assert.EqualValues(t, o.Job.MigratedBytes, final["migrated_bytes"])
	assert.EqualValues(t, 0, final["bytes_not_moved"])
	assert.EqualValues(t, 0, final["failed_units"])
	var statuses []string
	for _, e := range events {
		if e["msg"] == "drain-status" {
			statuses = append(statuses, e["status"].(string))
		}
	}
	assert.Equal(t, "SUCCEEDED", statuses[len(statuses)-1], "one line per status change, the last the end: %v", statuses)

	a.Signal(syscall.SIGTERM)
	a.Wait(t, 20*time.Second)
	r := client.Get(t, keys, size)
	assert.Len(t, r.OK, n, "every object from B, byte for byte; missing %v, wrong %v", r.Missing, r.Wrong)

	// Run again (a second preStop, or the member already gone): nothing to do, at once.
	log = lines{}
	o = Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Log: logger(&log)})
	assert.Equal(t, ResultNothingToDrain, o.Result)
	assert.Equal(t, "no segment of this member (Pod IP 127.0.0.2) is mounted on the master: nothing to move", o.Message)
}

// When B lacks room: the drain moves what fits, the log says what could not move, and Drain
// returns within its deadline (the job itself would go on failing units for longer).
func TestDrainWithoutRoom(t *testing.T) {
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{Tenants: []string{"team-a"}})
	a, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 64<<20)
	const n, size = 12, 4 << 20 // 48 MiB on A, all of it (B is not there yet); B holds 32 MiB
	keys := mooncaketest.Keys("full", n)
	client := mooncaketest.StartClient(t, bin, m, "team-a")
	client.Put(t, keys, size)
	_, segB := mooncaketest.StartMember(t, bin, m, "member B", "127.0.0.3", 32<<20)
	admin := store.New(m.Admin, store.WithTimeout(2*time.Second))

	var log lines
	const deadline = 6 * time.Second
	start := time.Now()
	o := Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Deadline: deadline, Log: logger(&log)})
	took := time.Since(start)
	t.Logf("%s after %s: %+v; log:\n%s", o.Result, took.Round(time.Millisecond), o.Job, log.buf.String())
	assert.Less(t, took, deadline+time.Second, "Drain returns at its deadline")
	require.Equal(t, ResultDeadline, o.Result, "%+v", o)
	assert.Equal(t, []string{segA}, o.Segments)
	assert.Equal(t, []string{segB}, o.Targets)
	assert.Equal(t, int64(n*size), o.BytesAtStart)
	assert.Equal(t, int64(32<<20), o.FreeOnTargets)
	assert.Positive(t, o.BytesNotMoved(), "not everything fits")

	events := log.events(t)
	assert.Contains(t, msgs(events), "drain-lacks-room")
	final := events[len(events)-1]
	assert.Equal(t, "drain-done", final["msg"])
	assert.Equal(t, "WARN", final["level"])
	assert.Equal(t, "deadline", final["result"])
	assert.EqualValues(t, o.BytesNotMoved(), final["bytes_not_moved"])
	assert.Contains(t, final["message"], "the objects not moved yet are lost when this member stops")

	// The job goes on and ends FAILED with what fit moved; a drain that waits for it says so.
	var j store.DrainJob
	mooncaketest.Poll(t, 3*time.Minute, "the job to end", []*mooncaketest.Proc{m.Proc, a}, func() error {
		var err error
		if j, err = admin.Drain(context.Background(), o.Job.ID); err == nil && !j.Done() {
			time.Sleep(200 * time.Millisecond)
			err = assert.AnError
		}
		return err
	})
	assert.Equal(t, store.DrainFailed, j.Status)
	assert.Equal(t, int64(8), j.SucceededUnits, "32 MiB of 4 MiB objects fit on B")
	r := client.Get(t, keys, size)
	assert.Len(t, r.OK, n, "a failed drain loses nothing while A runs; missing %v, wrong %v", r.Missing, r.Wrong)

	log = lines{}
	o = Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Deadline: 2 * time.Minute, Log: logger(&log)})
	t.Logf("second drain: %s after %s: %+v", o.Result, o.Elapsed.Round(time.Millisecond), o.Job)
	require.Equal(t, ResultPartial, o.Result, "%+v\n%s", o, log.buf.String())
	assert.Zero(t, o.Job.SucceededUnits, "B is full: none of the 4 left fits now")
	assert.Equal(t, int64(4*3), o.Job.FailedUnits, "each unit is tried 3 times")
	// A's allocator still counts the 8 objects that moved the first time (measured), so the
	// bytes not moved are an upper bound here.
	assert.Equal(t, int64(n*size), o.BytesAtStart)
	assert.Equal(t, int64(n*size), o.BytesNotMoved())
}

// Two members on one IP (host networking): the member process's ports tell its segment apart,
// and only that one is drained.
func TestDrainSharedIP(t *testing.T) {
	bin := mooncaketest.Bin(t)
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{})
	a, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 32<<20)
	_, segB := mooncaketest.StartMember(t, bin, m, "member B", "127.0.0.2", 32<<20)
	_, segC := mooncaketest.StartMember(t, bin, m, "member C", "127.0.0.3", 32<<20)
	admin := store.New(m.Admin, store.WithTimeout(2*time.Second))
	ports, err := ListeningPorts(a.Pid())
	require.NoError(t, err)

	o := Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Ports: ports, Deadline: time.Minute})
	require.Equal(t, ResultDrained, o.Result, "%+v", o)
	assert.Equal(t, []string{segA}, o.Segments)
	assert.ElementsMatch(t, []string{segB, segC}, o.Targets)
	st, err := admin.SegmentStatus(context.Background(), segB)
	require.NoError(t, err)
	assert.Equal(t, store.SegmentOK, st, "the other member on the same IP is not drained")
	st, err = admin.SegmentStatus(context.Background(), segA)
	require.NoError(t, err)
	assert.Equal(t, store.SegmentDrained, st)

	// Run again while A still runs: its segment is DRAINED, nothing left to move.
	o = Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Ports: ports, Deadline: time.Minute})
	assert.Equal(t, ResultNothingToDrain, o.Result)
	assert.Equal(t, "this member's segments are DRAINED already: nothing left to move", o.Message)
}

// Alone, a member has nowhere to put its objects: said at once, nothing created.
func TestDrainNoOtherMember(t *testing.T) {
	bin := mooncaketest.Bin(t)
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{})
	_, segA := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 32<<20)
	admin := store.New(m.Admin, store.WithTimeout(2*time.Second))
	o := Drain(context.Background(), Config{Admin: admin, PodIP: "127.0.0.2", Deadline: time.Minute})
	assert.Equal(t, ResultNoTarget, o.Result)
	assert.Empty(t, o.Job.ID)
	st, err := admin.SegmentStatus(context.Background(), segA)
	require.NoError(t, err)
	assert.Equal(t, store.SegmentOK, st)
}
