//go:build linux

package mooncaketest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// MasterOptions configure [StartMaster].
type MasterOptions struct {
	// Tenants are registered in the seed policy file at 1 GiB each; multi-tenancy is on when
	// there is at least one.
	Tenants []string
	// Args are added to the master's flags (e.g. -default_kv_lease_ttl=2000).
	Args []string
	// Quota is each tenant's quota in bytes (0: 1 GiB).
	Quota int64
	// Standby: the master may start as a standby (etcd HA), whose data routes do not answer;
	// wait only for /health.
	Standby bool
}

// Master is a running mooncake_master on loopback.
type Master struct {
	*Proc
	// RPC is the address members and clients connect to, Admin the admin API's base URL.
	RPC, Admin string
}

// StartMaster starts mooncake_master on free loopback ports and waits until /health answers.
func StartMaster(t testing.TB, bin string, o MasterOptions) *Master {
	t.Helper()
	ports := FreePorts(t, 2)
	args := []string{
		"-rpc_port=" + strconv.Itoa(ports[0]),
		"-metrics_port=" + strconv.Itoa(ports[1]),
		"-metrics_host=127.0.0.1",
		"-allocation_strategy=free_ratio_first",
	}
	if len(o.Tenants) > 0 {
		quota := o.Quota
		if quota == 0 {
			quota = 1 << 30
		}
		var policy strings.Builder
		policy.WriteString("version: 1\ntenants:\n")
		for _, id := range o.Tenants {
			fmt.Fprintf(&policy, "  - name: %q\n    quota: %d\n", id, quota)
		}
		file := filepath.Join(t.TempDir(), "tenant-quota-policy.yaml")
		require.NoError(t, os.WriteFile(file, []byte(policy.String()), 0o644))
		args = append(args, "-enable_multi_tenants=true", "-tenant_quota_connector_uri="+file)
	}
	m := &Master{
		Proc:  Start(t, "mooncake_master", 3*time.Second, nil, filepath.Join(bin, "mooncake_master"), append(args, o.Args...)...),
		RPC:   "127.0.0.1:" + strconv.Itoa(ports[0]),
		Admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]),
	}
	Poll(t, 10*time.Second, "mooncake_master /health and /get_segments_detail", []*Proc{m.Proc}, func() error {
		if _, err := GetURL(t.Context(), m.Admin+"/health"); err != nil || o.Standby {
			return err
		}
		_, err := segmentNames(t.Context(), m.Admin)
		return err
	})
	return m
}

// StartMember starts mc_store_rest_server with a segment of segmentBytes registered as host (a
// loopback address such as 127.0.0.2, standing in for a Pod IP: the segment is named
// host:<random port>), and waits until the master lists the segment, whose name it returns.
func StartMember(t testing.TB, bin string, m *Master, name, host string, segmentBytes int64) (*Proc, string) {
	t.Helper()
	var before map[string]bool
	Poll(t, 10*time.Second, "the master's segments before "+name, []*Proc{m.Proc}, func() error {
		var err error
		before, err = segmentNames(t.Context(), m.Admin)
		return err
	})
	p := Start(t, name, 5*time.Second, []string{
		"MOONCAKE_MASTER=" + m.RPC,
		"MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE",
		"MOONCAKE_PROTOCOL=tcp",
		"MOONCAKE_LOCAL_HOSTNAME=" + host,
		"MOONCAKE_GLOBAL_SEGMENT_SIZE=" + strconv.FormatInt(segmentBytes, 10),
		"MOONCAKE_LOCAL_BUFFER_SIZE=16777216",
		"MC_STORE_CLIENT_SETUP_RETRIES=2",
	}, filepath.Join(bin, "mc_store_rest_server"), "--port="+strconv.Itoa(FreePorts(t, 1)[0]))
	var segment string
	Poll(t, 20*time.Second, name+"'s segment listed by the master", []*Proc{m.Proc, p}, func() error {
		names, err := segmentNames(t.Context(), m.Admin)
		if err != nil {
			return err
		}
		for n := range names {
			if !before[n] && strings.HasPrefix(n, host+":") {
				segment = n
				return nil
			}
		}
		return fmt.Errorf("no new segment of %s among %v", host, names)
	})
	return p, segment
}

func segmentNames(ctx context.Context, admin string) (map[string]bool, error) {
	body, err := GetURL(ctx, admin+"/get_segments_detail")
	if err != nil {
		return nil, err
	}
	var d struct {
		Segments []struct {
			Name string `json:"segment_name"`
		} `json:"segments"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("GET /get_segments_detail: %w", err)
	}
	names := map[string]bool{}
	for _, s := range d.Segments {
		names[s.Name] = true
	}
	return names, nil
}

// GetURL GETs url (2 s at most) and returns the body of a 200 answer (at most 4 MiB).
func GetURL(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, body)
	}
	return body, nil
}

//go:embed store_client.py
var storeClientPy []byte

// Payload is the value a [Client] puts under key: the key, '|', the key's SHA-256 in hex and a
// newline, repeated and cut at size. It is derived from the key alone, so a read that returns
// another key's bytes, or shifted ones, never matches.
func Payload(key string, size int) []byte {
	sum := sha256.Sum256([]byte(key))
	unit := []byte(key + "|" + hex.EncodeToString(sum[:]) + "\n")
	return bytes.Repeat(unit, size/len(unit)+1)[:size]
}

// Client is a real MooncakeDistributedStore (the store's own Python client) in a child process,
// as an engine holds one: it puts [Payload]s and reports what reads return.
type Client struct {
	p       *Proc
	stdin   io.WriteCloser
	answers chan []byte
}

// StartClient starts a store client of tenant on master m (bin must hold the venv's python; see
// [Bin]) and waits for its setup.
func StartClient(t testing.TB, bin string, m *Master, tenant string) *Client {
	t.Helper()
	return StartClientAt(t, bin, m.RPC, tenant, nil)
}

// StartClientAt is [StartClient] for any master address the client reads (host:port, or
// etcd://... with MC_STORE_CLUSTER_ID in env), with env added to its environment.
func StartClientAt(t testing.TB, bin, master, tenant string, env []string) *Client {
	t.Helper()
	script := filepath.Join(t.TempDir(), "store_client.py")
	require.NoError(t, os.WriteFile(script, storeClientPy, 0o644))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &Client{stdin: inW, answers: make(chan []byte, 4)}
	c.p = StartWith(t, "store_client.py", Options{
		Grace:  5 * time.Second,
		Env:    append([]string{"STORE_CLIENT_MASTER=" + master, "STORE_CLIENT_TENANT=" + tenant, "STORE_CLIENT_LOCAL_BUFFER=67108864", "PYTHONUNBUFFERED=1"}, env...),
		Stdin:  inR,
		Stdout: outW,
	}, filepath.Join(bin, "python"), script)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			c.answers <- append([]byte(nil), sc.Bytes()...)
		}
		close(c.answers)
	}()
	go func() {
		<-c.p.Done()
		_ = outW.Close()
	}()
	t.Cleanup(func() { _ = inW.Close() })
	var setup struct {
		Op string `json:"op"`
		RC int    `json:"rc"`
	}
	require.NoError(t, c.call(nil, &setup, 60*time.Second))
	require.Equal(t, "setup", setup.Op, "the store client's first answer")
	require.Equal(t, 0, setup.RC, "MooncakeDistributedStore.setup")
	return c
}

// call sends req (nil: none) and decodes the next answer into out.
func (c *Client) call(req, out any, d time.Duration) error {
	if req != nil {
		line, err := json.Marshal(req)
		if err != nil {
			return err
		}
		if _, err := c.stdin.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("writing to the store client: %w\n%s", err, c.p.Output())
		}
	}
	select {
	case a, ok := <-c.answers:
		if !ok {
			return fmt.Errorf("the store client exited:\n%s", c.p.Output())
		}
		return json.Unmarshal(a, out)
	case <-time.After(d):
		return fmt.Errorf("the store client did not answer within %s:\n%s", d, c.p.Output())
	}
}

// Put puts Payload(key, size) under each key and fails the test unless every put returned 0.
// A put grants no lease, so the objects can be moved or removed at once.
func (c *Client) Put(t testing.TB, keys []string, size int) {
	t.Helper()
	rc := c.TryPut(t, keys, size)
	for _, k := range keys {
		require.Zero(t, rc[k], "put %s (%d bytes)", k, size)
	}
}

// TryPut is Put returning each put's code instead of requiring 0.
func (c *Client) TryPut(t testing.TB, keys []string, size int) map[string]int {
	t.Helper()
	var a struct {
		RC map[string]int `json:"rc"`
	}
	require.NoError(t, c.call(map[string]any{"op": "put", "keys": keys, "size": size}, &a, 5*time.Minute))
	return a.RC
}

// Reads is what reading keys back gave: OK keys returned their Payload byte for byte, Missing
// returned nothing, Wrong returned other bytes.
type Reads struct {
	OK, Missing, Wrong []string
}

// Get reads every key back (each of size bytes when present) and sorts them by what came back.
// A read leases the object for the master's default_kv_lease_ttl.
func (c *Client) Get(t testing.TB, keys []string, size int) Reads {
	t.Helper()
	got := c.read(t, keys)
	var r Reads
	for _, k := range keys {
		g := got[k]
		want := sha256.Sum256(Payload(k, size))
		switch {
		case g.Len == 0:
			r.Missing = append(r.Missing, k)
		case g.Len == size && g.SHA256 == hex.EncodeToString(want[:]):
			r.OK = append(r.OK, k)
		default:
			r.Wrong = append(r.Wrong, k)
		}
	}
	return r
}

// read is what reading each key returned: its length (0: a miss) and its SHA-256.
type read struct {
	Len    int    `json:"len"`
	SHA256 string `json:"sha256"`
}

func (c *Client) read(t testing.TB, keys []string) map[string]read {
	t.Helper()
	var a struct {
		Got map[string]read `json:"got"`
	}
	require.NoError(t, c.call(map[string]any{"op": "get", "keys": keys}, &a, 5*time.Minute))
	for _, k := range keys {
		_, ok := a.Got[k]
		require.True(t, ok, "the store client did not answer for %s", k)
	}
	return a.Got
}

// Remove removes each key and returns each remove's code.
func (c *Client) Remove(t testing.TB, keys []string) map[string]int {
	t.Helper()
	var a struct {
		RC map[string]int `json:"rc"`
	}
	require.NoError(t, c.call(map[string]any{"op": "remove", "keys": keys}, &a, time.Minute))
	return a.RC
}

// Whose reads every key back and says whose bytes came back: "" for a miss, the key itself for
// its own Payload, another of candidates for that key's Payload (of the length read), "?" for
// bytes that are no candidate's. A read leases the object, as Get does.
func (c *Client) Whose(t testing.TB, keys, candidates []string) map[string]string {
	t.Helper()
	got := c.read(t, keys)
	whose := map[string]string{}
	for _, k := range keys {
		g := got[k]
		if g.Len == 0 {
			whose[k] = ""
			continue
		}
		whose[k] = "?"
		for _, cand := range append([]string{k}, candidates...) {
			if sum := sha256.Sum256(Payload(cand, g.Len)); hex.EncodeToString(sum[:]) == g.SHA256 {
				whose[k] = cand
				break
			}
		}
	}
	return whose
}

// Keys are prefix-0 .. prefix-(n-1).
func Keys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + "-" + strconv.Itoa(i)
	}
	return keys
}
