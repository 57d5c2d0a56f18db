//go:build linux

package mooncaketest

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// script is hack/mooncake.sh, found from this file's place in the repository.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "hack", "mooncake.sh")
}

// Bin runs hack/mooncake.sh (a no-op once its venv is cached) and returns the venv's bin
// directory, after checking that it holds mooncake_master, mc_store_rest_server and every
// executable named in extra (such as "python"). A failure FAILS the test with a message that
// names hack/mooncake.sh: the real store is part of the suite, never skipped.
func Bin(t testing.TB, extra ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), script())
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/mooncake.sh (provides the real mooncake_master, mc_store_rest_server and the Python client from PyPI) failed: %v\n"+
			"run `hack/mooncake.sh` (and `make tools`) on this machine and read its output\n%s", err, stderr.String())
	}
	bin := strings.TrimSpace(string(out))
	for _, exe := range append([]string{"mooncake_master", "mc_store_rest_server"}, extra...) {
		if _, err := os.Stat(filepath.Join(bin, exe)); err != nil {
			t.Fatalf("hack/mooncake.sh printed %q, which has no %s (%v): rerun `hack/mooncake.sh`", bin, exe, err)
		}
	}
	return bin
}

// FreePorts returns n distinct free loopback ports (listen on :0, then close).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}

// SyncBuffer is a bytes.Buffer one goroutine writes while another reads: a process's output, a
// logger's lines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is a process started by [Start], the leader of its own process group.
type Proc struct {
	name  string
	cmd   *exec.Cmd
	out   *SyncBuffer
	done  chan struct{}
	err   error
	code  int // valid once done is closed
	grace time.Duration
}

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the exit code (128+N when signal N ended it), valid once Done is closed.
func (p *Proc) ExitCode() int { return p.code }

// Pid is the process's id (and its group's).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Wait waits up to d for the process to exit and returns its exit code (128+N when signal N
// ended it); the test fails when it does not exit in time.
func (p *Proc) Wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", p.name, d)
		return -1
	}
}

// Signal signals the process alone, not its group, as the kubelet signals a container's first
// process.
func (p *Proc) Signal(sig syscall.Signal) { _ = syscall.Kill(p.Pid(), sig) }

// Exited reports whether the process has exited (and been reaped).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output is everything the process wrote so far, stdout and stderr interleaved.
func (p *Proc) Output() string { return p.out.String() }

// tail is the end of the process's output, for failure messages.
func (p *Proc) tail() string {
	s := p.out.String()
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	return s
}

// Kill sends SIGKILL to the process group and waits for the process to be reaped.
func (p *Proc) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, then SIGKILL after the grace period given to
// [Start] (the member ignores SIGTERM while it connects to a master), then SIGKILL again for
// any straggler of the group. It returns once the process is reaped; calling it again is
// harmless. The test's cleanup calls it too.
func (p *Proc) Stop() {
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

// childEnv is the test process's environment without the Mooncake variables (MOONCAKE_*,
// MC_*) and any other prefix in drop, so that nothing from the caller's shell configures a store
// process behind the test's back, followed by extra.
func childEnv(extra []string, drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if slices.ContainsFunc(append([]string{"MOONCAKE_", "MC_"}, drop...), func(p string) bool { return strings.HasPrefix(kv, p) }) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// procAttr puts a child in its own process group, so that one signal reaches every process it
// starts, with SIGKILL as its parent-death signal, so that a killed test binary leaves nothing
// running.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Start starts bin with args in its own process group. Its environment is the test's without
// the MOONCAKE_* and MC_* variables, plus env. name labels the process in failure messages.
// When the test ends the process is stopped ([Proc.Stop]: SIGTERM, then SIGKILL after grace),
// and a failed test logs its output.
func Start(t testing.TB, name string, grace time.Duration, env []string, bin string, args ...string) *Proc {
	t.Helper()
	return StartWith(t, name, Options{Grace: grace, Env: env}, bin, args...)
}

// Options configure [StartWith].
type Options struct {
	// Grace between SIGTERM and SIGKILL when the process is stopped.
	Grace time.Duration
	// Env is added to the environment; variables starting with a DropEnv prefix are taken out
	// of the test's own first.
	Env     []string
	DropEnv []string
	// Stdin is the process's standard input; Stdout, when set, receives its standard output
	// instead of [Proc.Output].
	Stdin  io.Reader
	Stdout io.Writer
}

// StartWith is [Start] with every option.
func StartWith(t testing.TB, name string, o Options, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{name: name, out: &SyncBuffer{}, done: make(chan struct{}), grace: o.Grace}
	// Not the test's context: the process is stopped gracefully by Stop, not killed on cancel.
	p.cmd = exec.CommandContext(context.Background(), bin, args...)
	p.cmd.Env = childEnv(o.Env, o.DropEnv...)
	p.cmd.Stdin = o.Stdin
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if o.Stdout != nil {
		p.cmd.Stdout = o.Stdout
	}
	p.cmd.SysProcAttr = procAttr()
	require.NoError(t, p.cmd.Start(), "starting %s", name)
	go func() {
		p.err = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("%s (%s) output:\n%s", name, strings.Join(p.cmd.Args, " "), p.tail())
		}
	})
	return p
}

// Run runs bin with args to completion in its own process group, with the environment [Start]
// gives, killing the group at the timeout, and returns its stdout and stderr.
func Run(t testing.TB, timeout time.Duration, env []string, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv(env)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers of the group, if any
	}
	return o.String(), e.String(), err
}

// Poll retries f every 50 ms until it returns nil or d passes, and fails the test with the
// last error. A watched process that exits meanwhile ends the wait at once, with its exit
// status and the end of its output.
func Poll(t testing.TB, d time.Duration, what string, watch []*Proc, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		for _, p := range watch {
			if p.Exited() {
				t.Fatalf("%s: %s exited (%v) while waiting; last error: %v\n%s", what, p.name, p.err, err, p.tail())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last error: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
