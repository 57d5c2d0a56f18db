package member

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/store"
)

// fakeMaster answers the three admin routes a fresh name is read from, as a 0.3.13.post1
// master does: /health always, /get_segments_detail only while serving (503 otherwise),
// /metrics always (a standby's carries no segment).
type fakeMaster struct {
	mu sync.Mutex
	// notServing counts the reads of /health still to answer as a standby.
	notServing int
	// live are mounted segments (name, te_endpoint); dead are names only /metrics carries.
	live       [][2]string
	dead       []string
	segments   int // calls of /get_segments_detail
	noSegments bool
}

func (f *fakeMaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	serving := f.notServing <= 0
	switch r.URL.Path {
	case "/health":
		if !serving {
			f.notServing--
			_, _ = fmt.Fprint(w, `{"status":"ok","role":"standby","ha_state":"standby","service_ready":false}`)
			return
		}
		_, _ = fmt.Fprint(w, `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true}`)
	case "/get_segments_detail":
		f.segments++
		if f.noSegments {
			http.NotFound(w, r)
			return
		}
		if !serving {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprint(w, `{"success":false,"error_code":-1011,"error_message":"service plane is not active"}`)
			return
		}
		type seg struct {
			Name string `json:"segment_name"`
			TE   string `json:"te_endpoint"`
		}
		d := struct {
			Total    int   `json:"total_segments"`
			Segments []seg `json:"segments"`
		}{Total: len(f.live), Segments: []seg{}}
		for _, s := range f.live {
			d.Segments = append(d.Segments, seg{s[0], s[1]})
		}
		_ = json.NewEncoder(w).Encode(d)
	case "/metrics":
		var b strings.Builder
		b.WriteString("# HELP master_key_count Total number of keys managed by the master\n# TYPE master_key_count gauge\nmaster_key_count 3\n")
		if serving {
			b.WriteString("# HELP segment_allocated_bytes Allocated bytes per segment\n# TYPE segment_allocated_bytes gauge\n")
			for _, s := range f.live {
				fmt.Fprintf(&b, "segment_allocated_bytes{segment=%q} 0\n", s[0])
			}
			for _, n := range f.dead {
				fmt.Fprintf(&b, "segment_allocated_bytes{segment=%q} 6553600\n", n)
			}
		}
		_, _ = fmt.Fprint(w, b.String())
	default:
		http.NotFound(w, r)
	}
}

func startFake(t *testing.T, f *fakeMaster) *store.Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return store.New(srv.URL)
}

// all picks every free port in turn: intn(n) records n and answers the next index.
type all struct{ n []int }

func (a *all) intn(n int) int { a.n = append(a.n, n); return 0 }

func TestFreshNameAvoidsLiveAndDeadNamesOfItsHost(t *testing.T) {
	f := &fakeMaster{
		live: [][2]string{{"10.0.0.7:13001", "10.0.0.7:15001"}, {"10.0.0.8:13003", "10.0.0.8:15002"}},
		dead: []string{"10.0.0.7:13000", "10.0.0.7:13002", "10.0.0.9:13004"},
	}
	pickIdx := &all{}
	got, err := FreshName(t.Context(), FreshConfig{Admin: startFake(t, f), PodIP: "10.0.0.7", MinPort: 13000, MaxPort: 13004, Intn: pickIdx.intn})
	require.NoError(t, err)
	// 13000-13004 less 13000, 13001, 13002: the other hosts' ports stay free.
	assert.Equal(t, []int{2}, pickIdx.n)
	assert.Equal(t, "10.0.0.7:13003", got.Name)
	assert.Equal(t, 13003, got.Port)
	assert.Equal(t, []string{"10.0.0.7:13001"}, got.Live)
	assert.Equal(t, []string{"10.0.0.7:13000", "10.0.0.7:13002"}, got.Dead)
	assert.Equal(t, 1, got.Attempts)
}

func TestFreshNameNeverPicksAKnownPort(t *testing.T) {
	f := &fakeMaster{live: [][2]string{{"10.0.0.7:20001", "10.0.0.7:15001"}}, dead: []string{"10.0.0.7:20003"}}
	admin := startFake(t, f)
	seen := map[string]bool{}
	for k := range 3 {
		got, err := FreshName(t.Context(), FreshConfig{Admin: admin, PodIP: "10.0.0.7", MinPort: 20001, MaxPort: 20004, Intn: func(n int) int {
			require.Equal(t, 2, n)
			return k % n
		}})
		require.NoError(t, err)
		seen[got.Name] = true
	}
	assert.Equal(t, map[string]bool{"10.0.0.7:20002": true, "10.0.0.7:20004": true}, seen)
}

func TestFreshNameRangeExhausted(t *testing.T) {
	f := &fakeMaster{live: [][2]string{{"10.0.0.7:13000", "10.0.0.7:15001"}}, dead: []string{"10.0.0.7:13001"}}
	_, err := FreshName(t.Context(), FreshConfig{Admin: startFake(t, f), PodIP: "10.0.0.7", MinPort: 13000, MaxPort: 13001})
	require.ErrorIs(t, err, ErrPortRangeExhausted)
	assert.Contains(t, err.Error(), "13000-13001")
	assert.Contains(t, err.Error(), "1 mounted, 1 only indexed")
}

func TestFreshNameIPv6(t *testing.T) {
	// A name with an explicit port, as a member is told it, is bracketed; a name the store
	// completed itself is too ("[fd00::7]:12975"); one written bare ("fd00::7:13001") keeps its
	// last colon as the port's. Each spelling of this host counts, another host's does not.
	f := &fakeMaster{
		live: [][2]string{{"[fd00::7]:13000", "fd00::7:15001"}, {"[fd00::8]:13002", "fd00::8:15002"}},
		dead: []string{"fd00:0:0:0:0:0:0:7:13001", "[fd00::70]:13003"},
	}
	got, err := FreshName(t.Context(), FreshConfig{Admin: startFake(t, f), PodIP: "fd00:0::7", MinPort: 13000, MaxPort: 13003, Intn: func(n int) int {
		require.Equal(t, 2, n)
		return 1
	}})
	require.NoError(t, err)
	assert.Equal(t, "[fd00::7]:13003", got.Name, "canonical address, bracketed, so the store sees a port")
	assert.Equal(t, []string{"[fd00::7]:13000"}, got.Live)
	assert.Equal(t, []string{"fd00:0:0:0:0:0:0:7:13001"}, got.Dead)

	// An IPv4 Pod IP written IPv4-mapped is named as IPv4, as the master's names are.
	got, err = FreshName(t.Context(), FreshConfig{Admin: startFake(t, &fakeMaster{}), PodIP: "::ffff:10.0.0.7", MinPort: 13000, MaxPort: 13000})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.7:13000", got.Name)
}

func TestFreshNameRefusesBadInput(t *testing.T) {
	admin := startFake(t, &fakeMaster{})
	for _, c := range []struct {
		ip       string
		min, max int
		want     string
	}{
		{"member-0.example", 13000, 13001, "not an IP address"},
		{"fe80::1%eth0", 13000, 13001, "not an IP address"},
		{"", 13000, 13001, "not an IP address"},
		{"10.0.0.7", 0, 13001, "port range"},
		{"10.0.0.7", 13001, 13000, "port range"},
		{"10.0.0.7", 13000, 70000, "port range"},
	} {
		_, err := FreshName(t.Context(), FreshConfig{Admin: admin, PodIP: c.ip, MinPort: c.min, MaxPort: c.max})
		require.Error(t, err, "%+v", c)
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestFreshNameWaitsForAServingMaster(t *testing.T) {
	f := &fakeMaster{notServing: 3, dead: []string{"10.0.0.7:13000"}}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil))
	got, err := FreshName(t.Context(), FreshConfig{Admin: startFake(t, f), PodIP: "10.0.0.7", MinPort: 13000, MaxPort: 13001, Log: log})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.7:13001", got.Name, "the dead name of the serving master is avoided; a standby's /metrics has none")
	assert.Equal(t, 4, got.Attempts)
	assert.Greater(t, got.Waited, 3*freshFirstBackoff)
	assert.Contains(t, logs.String(), `"msg":"member-run-waiting"`)
	assert.Contains(t, logs.String(), `not serving (role \"standby\"`)
	assert.Equal(t, 1, strings.Count(logs.String(), "member-run-waiting"), "one line per reason")
}

func TestFreshNameGivesUpWithTheContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	_, err := FreshName(ctx, FreshConfig{Admin: store.New(srv.URL), PodIP: "10.0.0.7", MinPort: 13000, MaxPort: 13001})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "no master served within")
	assert.Contains(t, err.Error(), "503")

	// Nothing listening at all: the same.
	srv.Close()
	ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = FreshName(ctx, FreshConfig{Admin: store.New(srv.URL), PodIP: "10.0.0.7", MinPort: 13000, MaxPort: 13001})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestFreshNameRefusesAMasterWithoutTheSegmentListing(t *testing.T) {
	f := &fakeMaster{noSegments: true}
	_, err := FreshName(t.Context(), FreshConfig{Admin: startFake(t, f), PodIP: "10.0.0.7", MinPort: 13000, MaxPort: 13001})
	require.ErrorIs(t, err, store.ErrNotSupported)
	assert.Equal(t, 1, f.segments, "no retry: such a master never lists them")
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
