//go:build linux

package ha_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/member"
	"github.com/kvcache-operator/kvcache/store"
)

// TestWarmDrainThroughFailover stops a member (its preStop drain, kvcache drain-member, as the
// operator renders it for a warm store) while the serving master fails over: the drain job the
// old master ran is unknown to the new one, which kept the objects. The drain waits for the new
// master and drains again there, so every object of the stopping member is kept on the other one,
// each read back with its own bytes.
//
// The new master leases every object it restored for default_kv_lease_ttl (measured: the
// second job's units stay blocked exactly that long), and a leased object cannot move: the
// masters run with leader.extraArgs -default_kv_lease_ttl=15s, as a warm store whose members
// may drain during a failover is set up (with the rendered 5m, the default drainTimeout of
// 300 s would end first).
func TestWarmDrainThroughFailover(t *testing.T) {
	t.Parallel() // a store of its own per case
	bin := mooncaketest.Bin(t, "python")
	etcdBin := etcdBinary(t)
	// 48 MiB: the other member's 64 MiB segment takes them all below the eviction watermark.
	const n, size = 48, 1 << 20
	for _, graceful := range []bool{false, true} {
		how := map[bool]string{false: "killed", true: "stopped (SIGTERM)"}[graceful]
		t.Run("the serving master "+how+" while a member drains", func(t *testing.T) {
			t.Parallel()
			w := startWarm(t, bin, etcdBin, warmOptions{service: true, args: renderedWarmFlags(t, "-default_kv_lease_ttl=15s"), segment: 256 << 20})
			w.startMember("127.0.0.3")
			keys := mooncaketest.Keys("drained", n)
			w.client.Put(t, keys, size)
			time.Sleep(time.Second) // the log catches up with the puts
			ports, err := member.ListeningPorts(w.member.Pid())
			require.NoError(t, err)

			// The member's drain reaches the masters' admin API as it does the leader Service's:
			// whichever master serves, and connection refused while none does.
			admin := store.New("http://leader-service", store.WithTimeout(2*time.Second), store.WithTransport(w.serviceTransport()))
			var log mooncaketest.SyncBuffer
			done := make(chan member.Outcome, 1)
			t0 := time.Now()
			go func() {
				done <- member.Drain(context.Background(), member.Config{Admin: admin, PodIP: "127.0.0.2", Ports: ports,
					Deadline: 300 * time.Second, MaxConcurrency: 2, Warm: true, Log: slog.New(slog.NewJSONHandler(&log, nil))})
			}()
			_, err = poll(30*time.Second, func() error {
				if !strings.Contains(log.String(), `"drain-created"`) {
					return fmt.Errorf("no drain job yet")
				}
				return nil
			})
			require.NoError(t, err, "the drain job created; log:\n%s", log.String())
			time.Sleep(1500 * time.Millisecond) // some objects moved, most not
			before := w.where(w.serving(), keys[0])
			old := w.stop(graceful)
			killed := time.Since(t0)
			w.awaitLeader(old, 60*time.Second)
			w.addMaster(nil)
			var o member.Outcome
			select {
			case o = <-done:
			case <-time.After(6 * time.Minute):
				t.Fatalf("the drain did not end; log:\n%s", log.String())
			}
			t.Logf("drain of 127.0.0.2 (master %s %s in): %s after %s, %d units moved on the last job; log:\n%s\nfirst key before: %s",
				how, killed.Round(time.Millisecond), o.Result, o.Elapsed.Round(time.Millisecond), o.Job.SucceededUnits, log.String(), before)
			assert.Equal(t, member.ResultDrained, o.Result, "%s", o.Message)
			assert.Contains(t, log.String(), `"drain-restarting"`, "the drain started again on the new master")

			// The member stops; every object is on the other member, with its own bytes.
			w.member.Signal(syscall.SIGTERM)
			w.member.Wait(t, 20*time.Second)
			w.client.Whose(t, keys[:1], nil) // the client's first call after a failover reconnects
			whose := w.client.Whose(t, keys, keys)
			var kept, wrong int
			for _, k := range keys {
				switch whose[k] {
				case k:
					kept++
				case "":
					t.Logf("%s missing: %s", k, w.where(w.serving(), k))
				default:
					wrong++
				}
			}
			t.Logf("master %s during the drain: kept %d/%d, wrong %d after the drained member stopped", how, kept, n, wrong)
			assert.Zero(t, wrong, "no read returns another key's bytes")
			assert.Equal(t, n, kept, "every object of the drained member moved to the other one")
		})
	}
}

// serviceTransport routes every request to the serving master's admin address, and refuses the
// connection while no master serves, as the leader Service does.
func (w *warmStore) serviceTransport() http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		m := w.serving()
		if m == nil {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		u, err := url.Parse(m.Admin)
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, u.Host
		return http.DefaultTransport.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
