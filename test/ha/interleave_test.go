//go:build linux

package ha_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
)

// warmTrials is how many failovers each interleaving is measured over.
const warmTrials = 5

// TestWarmInterleavings fails the leader over, five times per case, right after what an engine
// does to the store, on masters with the flags the operator renders for warm failover and two
// members and a client behind one address (the leader Service). Every object's bytes derive from
// its key, so a read that returns another key's bytes is told from a miss and from the key's own
// bytes. In every case no read may return another key's bytes; where the operations were
// acknowledged a second before the kill (the operation log is written asynchronously), every
// object must be kept. Each case logs kept / N, wrong reads and the failover time, per trial and
// as medians.
func TestWarmInterleavings(t *testing.T) {
	t.Parallel() // each case runs a store of its own (etcd, masters, members, client on their own ports)
	bin := mooncaketest.Bin(t, "python")
	etcdBin := etcdBinary(t)
	const n, size = 40, 64 << 10

	cases := []struct {
		name string
		// settled: every operation was acknowledged a second before the kill, so every object
		// put must be kept.
		settled bool
		// graceful stops the leader with SIGTERM (a deleted Pod) instead of SIGKILL.
		graceful bool
		// before runs against the serving store just before the kill and returns the keys to
		// read back afterwards with, for each, the keys whose bytes would be its own (nil: the
		// key alone), and a function to wait on after the kill (nil: none).
		before func(t *testing.T, w *warmStore, prefix string) (keys []string, after func())
	}{
		{name: "the leader killed (SIGKILL) a second after the puts", settled: true, before: func(t *testing.T, w *warmStore, p string) ([]string, func()) {
			keys := mooncaketest.Keys(p, n)
			w.client.Put(t, keys, size)
			time.Sleep(time.Second)
			return keys, nil
		}},
		{name: "the leader stopped (SIGTERM, a deleted Pod) a second after the puts", settled: true, graceful: true, before: func(t *testing.T, w *warmStore, p string) ([]string, func()) {
			keys := mooncaketest.Keys(p, n)
			w.client.Put(t, keys, size)
			time.Sleep(time.Second)
			return keys, nil
		}},
		{name: "the leader killed right after a quarter of the objects was removed", before: func(t *testing.T, w *warmStore, p string) ([]string, func()) {
			keys := mooncaketest.Keys(p, n)
			w.client.Put(t, keys, size)
			time.Sleep(time.Second)
			for k, rc := range w.client.Remove(t, keys[:n/4]) {
				require.Zero(t, rc, "remove %s", k)
			}
			return keys, nil
		}},
		{name: "the leader killed right after a quarter of the keys was put again with other bytes", before: func(t *testing.T, w *warmStore, p string) ([]string, func()) {
			keys := mooncaketest.Keys(p, n)
			w.client.Put(t, keys, size)
			time.Sleep(time.Second)
			w.client.TryPut(t, keys[:n/4], size/2) // a put of an existing key keeps the old bytes
			return keys, nil
		}},
		{name: "the leader killed right after a quarter of the objects was removed and put again with other bytes", before: func(t *testing.T, w *warmStore, p string) ([]string, func()) {
			keys := mooncaketest.Keys(p, n)
			w.client.Put(t, keys, size)
			time.Sleep(time.Second)
			for k, rc := range w.client.Remove(t, keys[:n/4]) {
				require.Zero(t, rc, "remove %s", k)
			}
			w.client.TryPut(t, keys[:n/4], size/2)
			w.client.TryPut(t, mooncaketest.Keys(p+"-later", n/4), size/2)
			return keys, nil
		}},
		{name: "the leader killed while puts are in flight", before: func(t *testing.T, w *warmStore, p string) ([]string, func()) {
			keys := mooncaketest.Keys(p, n)
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.client.TryPut(t, keys, size)
			}()
			time.Sleep(20 * time.Millisecond)
			return keys, func() { <-done }
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a failover's floor is the etcd lease and the master's warm-up, not CPU
			w := startWarm(t, bin, etcdBin, warmOptions{service: true, args: renderedWarmFlags(t)})
			w.startMember("127.0.0.3")
			var kept, wrong []int
			var took, whole []time.Duration
			for trial := 1; trial <= warmTrials; trial++ {
				keys, after := c.before(t, w, fmt.Sprintf("t%d", trial))
				t0 := time.Now()
				old := w.stop(c.graceful)
				served := w.awaitLeader(old, 60*time.Second)
				back := w.awaitRemounts(30 * time.Second)
				if after != nil {
					after()
				}
				all := append(slices.Clone(keys), mooncaketest.Keys(fmt.Sprintf("t%d-later", trial), n/4)...)
				// The client's first call after a failover fails on its old connection
				// (RPC_FAIL, read as a miss) and reconnects: the second read is the store's answer.
				w.client.Whose(t, all[:1], nil)
				whose := w.client.Whose(t, all, all)
				var k, bad int
				var foreign []string
				for _, key := range keys {
					if whose[key] == key {
						k++
					}
				}
				for _, key := range all {
					if who := whose[key]; who != "" && who != key {
						bad++
						foreign = append(foreign, key+"<-"+who)
					}
				}
				kept, wrong, took, whole = append(kept, k), append(wrong, bad), append(took, served.Sub(t0)), append(whole, back.Sub(t0))
				t.Logf("trial %d: a new master served %s after the %s, every member back on it at %s; kept %d/%d, wrong %d %v",
					trial, served.Sub(t0).Round(time.Millisecond), map[bool]string{true: "SIGTERM", false: "SIGKILL"}[c.graceful], back.Sub(t0).Round(time.Millisecond), k, len(keys), bad, foreign)
				assert.Zero(t, bad, "trial %d: no read returns another key's bytes", trial)
				if c.settled {
					assert.Equal(t, len(keys), k, "trial %d: every object acknowledged a second before is kept", trial)
				}
				w.addMaster(nil) // the stopped master's Pod starts again, as a standby
			}
			t.Logf("medians over %d failovers: kept %d/%d, wrong %d, a new master serving %s after the signal, every member back on it at %s",
				warmTrials, medianInt(kept), n, medianInt(wrong), medianDuration(took).Round(time.Millisecond), medianDuration(whole).Round(time.Millisecond))
		})
	}
}

// startMember starts one more member at host (a loopback address as its Pod IP), addressing the
// store as the first does, and waits until the serving master lists its segment; a new leader
// counts as serving (awaitLeader) only once every member registered with it again.
func (w *warmStore) startMember(host string) *mooncaketest.Proc {
	w.t.Helper()
	p := mooncaketest.Start(w.t, "mc_store_rest_server", 5*time.Second, append([]string{
		"MOONCAKE_MASTER=" + w.master, "MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE", "MOONCAKE_PROTOCOL=tcp",
		"MOONCAKE_LOCAL_HOSTNAME=" + host, "MOONCAKE_GLOBAL_SEGMENT_SIZE=" + strconv.Itoa(64<<20), "MOONCAKE_LOCAL_BUFFER_SIZE=16777216",
	}, w.env...), filepath.Join(w.bin, "mc_store_rest_server"), "--port="+strconv.Itoa(mooncaketest.FreePorts(w.t, 1)[0]))
	w.hosts = append(w.hosts, host)
	_, err := poll(30*time.Second, w.segmentMounted)
	require.NoError(w.t, err, "the member at %s registers", host)
	return p
}

// awaitRemounts waits until every member mounted its segment again on the serving master, which
// lists the segments it restored from the log before their members are back (the objects on
// a member not yet back miss meanwhile), and returns when.
func (w *warmStore) awaitRemounts(d time.Duration) time.Time {
	w.t.Helper()
	want := 1 + len(w.hosts)
	at, err := poll(d, func() error {
		m := w.serving()
		if m == nil {
			return fmt.Errorf("no master serves")
		}
		body, err := mooncaketest.GetURL(w.t.Context(), m.Admin+"/metrics")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "master_remount_segment_requests_total "); ok {
				if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && int(n) >= want {
					return nil
				}
				return fmt.Errorf("%s of %d members mounted again", strings.TrimSpace(v), want)
			}
		}
		return fmt.Errorf("no master_remount_segment_requests_total")
	})
	require.NoError(w.t, err, "every member mounts its segment on the new master")
	return at
}

// stop signals the serving master (SIGTERM when graceful, else SIGKILL), waits until it is gone
// and returns it.
func (w *warmStore) stop(graceful bool) *mooncaketest.Master {
	w.t.Helper()
	if !graceful {
		return w.kill()
	}
	m := w.serving()
	require.NotNil(w.t, m, "a master serves")
	m.Signal(syscall.SIGTERM)
	m.Wait(w.t, 30*time.Second)
	return m
}

func medianInt(v []int) int {
	s := slices.Clone(v)
	sort.Ints(s)
	return s[len(s)/2]
}

func medianDuration(v []time.Duration) time.Duration {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
