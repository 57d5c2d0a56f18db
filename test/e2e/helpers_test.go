//go:build linux

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/testenv"
)

// Process helpers: the real Mooncake binaries from the PyPI venv, each in its own process
// group, stopped when the test ends.

// mooncakeBin runs hack/mooncake.sh (a no-op once its venv is cached) and returns the venv's
// bin directory. A failure FAILS the test: the real store is part of this suite, never skipped.
func mooncakeBin(t *testing.T) string {
	t.Helper()
	script := filepath.Join(testenv.RepoRoot(), "hack", "mooncake.sh")
	var stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/mooncake.sh (provides the real mooncake_master, mc_store_rest_server and the Python client from PyPI) failed: %v\n"+
			"run `hack/mooncake.sh` (and `make tools`) on this machine and read its output\n%s", err, stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	for _, exe := range []string{"mooncake_master", "mc_store_rest_server", "python"} {
		if _, err := os.Stat(filepath.Join(bin, exe)); err != nil {
			t.Fatalf("hack/mooncake.sh printed %q, which has no %s (%v): rerun `hack/mooncake.sh`", bin, exe, err)
		}
	}
	return bin
}

// freePorts returns n distinct free loopback ports (listen on :0, then close).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a started process, the leader of its own process group.
type proc struct {
	name  string
	cmd   *exec.Cmd
	out   *syncBuffer
	done  chan struct{}
	err   error
	grace time.Duration
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the process's output, for failure messages.
func (p *proc) tail() string {
	s := p.out.String()
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	return s
}

// kill sends SIGKILL to the process group and waits for the process to be reaped.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM to the process group, then SIGKILL after the grace period (the member
// ignores SIGTERM while it connects to a master), then SIGKILL again for any straggler of the
// group.
func (p *proc) stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(p.grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH when the group is gone
}

// childEnv is the test process's environment without the Mooncake variables, so that nothing
// from the caller's shell configures a store process behind the test's back.
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MOONCAKE_") || strings.HasPrefix(kv, "MC_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// startProc starts path in its own process group with the given environment additions. The
// process is stopped (SIGTERM, then SIGKILL after grace) when the test ends; a failed test
// prints its output.
func startProc(t *testing.T, name, path string, args, env []string, grace time.Duration) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{}), grace: grace}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = childEnv(env)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Own group, so one signal reaches every child; Pdeathsig so a killed test binary leaves
	// nothing running.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, p.cmd.Start(), "starting %s", name)
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s (%s) output:\n%s", name, strings.Join(p.cmd.Args, " "), p.tail())
		}
	})
	return p
}

// runProc runs a short-lived process to completion (own process group, killed at the
// deadline) and returns its stdout and stderr.
func runProc(t *testing.T, timeout time.Duration, path string, args, env []string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = childEnv(env)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers of the group, if any
	}
	return o.String(), e.String(), err
}

// poll retries f every 50 ms until it returns nil or d passes, and fails the test with the
// last error. A watched process that exits meanwhile ends the wait at once.
func poll(t *testing.T, d time.Duration, what string, watch []*proc, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		for _, p := range watch {
			if p.exited() {
				t.Fatalf("%s: %s exited (%v) while waiting; last error: %v\n%s", what, p.name, p.err, err, p.tail())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last error: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Admin API of the real master, read directly (not through operator/store), so that what the
// operator reports is checked against what the store itself says.

type adminAPI struct{ base string }

var adminHTTP = &http.Client{Timeout: 3 * time.Second}

func (a adminAPI) get(path string) ([]byte, error) {
	resp, err := adminHTTP.Get(a.base + path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return body, nil
}

type ledgerEntry struct {
	TenantID            string `json:"tenant_id"`
	RequestedQuotaBytes int64  `json:"requested_quota_bytes"`
	EffectiveQuotaBytes int64  `json:"effective_quota_bytes"`
	ChargedBytes        int64  `json:"charged_bytes"`
}

// ledger is GET /api/v1/tenant_quotas, by tenant.
func (a adminAPI) ledger() (map[string]ledgerEntry, error) {
	body, err := a.get("/api/v1/tenant_quotas")
	if err != nil {
		return nil, err
	}
	var env struct {
		Success bool          `json:"success"`
		Data    []ledgerEntry `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("tenant_quotas %s: %w", body, err)
	}
	if !env.Success {
		return nil, fmt.Errorf("tenant_quotas: %s", body)
	}
	out := map[string]ledgerEntry{}
	for _, e := range env.Data {
		out[e.TenantID] = e
	}
	return out, nil
}

type segment struct {
	Name      string `json:"segment_name"`
	SizeBytes int64  `json:"size_bytes"`
	Protocol  string `json:"protocol"`
	Status    string `json:"status"`
	UsedBytes int64  `json:"allocator_used_bytes"`
}

// segments is GET /get_segments_detail.
func (a adminAPI) segments() ([]segment, error) {
	body, err := a.get("/get_segments_detail")
	if err != nil {
		return nil, err
	}
	var d struct {
		Segments []segment `json:"segments"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("get_segments_detail %s: %w", body, err)
	}
	return d.Segments, nil
}
