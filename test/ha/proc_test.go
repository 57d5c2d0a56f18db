//go:build linux

package ha_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proc is a process the test starts: the leader of its own process group (as a container's
// processes are apart from the test's), killed with the test binary (parent-death signal).
// Unlike internal/mooncaketest's, it exposes its pid and exit code, and lets the test signal
// the process alone, as the kubelet signals a container's first process.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *lines
	done chan struct{}
	code int // valid once done is closed
}

// lines collects a process's output and splits it into lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// processEnv is the test's environment without Mooncake's variables (MOONCAKE_*, MC_*) and
// without the Pod identity variables, so nothing from the caller's shell configures a process
// behind the test's back, followed by extra.
func processEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MOONCAKE_") || strings.HasPrefix(kv, "MC_") ||
			strings.HasPrefix(kv, "POD_NAME=") || strings.HasPrefix(kv, "POD_NAMESPACE=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// startProc starts bin with args. stdout, when not nil, receives the standard output instead
// of the collected output. The test's cleanup stops the process ([proc.stop]) and, when the
// test failed, logs the end of its output.
func startProc(t *testing.T, name string, env []string, stdin io.Reader, stdout io.Writer, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &lines{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = processEnv(env)
	p.cmd.Stdin = stdin
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if stdout != nil {
		p.cmd.Stdout = stdout
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, p.cmd.Start(), "starting %s", name)
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			out := p.out.String()
			if len(out) > 8000 {
				out = "…" + out[len(out)-8000:]
			}
			t.Logf("%s (%s) output:\n%s", name, strings.Join(p.cmd.Args, " "), out)
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the process to exit and returns its exit code (128+N for signal N).
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s", p.name, d)
		return -1
	}
}

// signal signals the process alone, not its group.
func (p *proc) signal(sig syscall.Signal) { _ = syscall.Kill(p.pid(), sig) }

// stop sends SIGTERM to the group, SIGKILL after 10 s; harmless when already stopped.
func (p *proc) stop() {
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
}

// logEvent is one structured line a launcher wrote.
type logEvent struct {
	TS     string `json:"ts"`
	Level  string `json:"level"`
	Logger string `json:"logger"`
	Msg    string `json:"msg"`
	PID    int    `json:"pid"`
	Reason string `json:"reason"`
	Code   *int   `json:"exitCode"`
	raw    string
}

// at is when the launcher logged the event (it writes RFC 3339 with nanoseconds).
func (e logEvent) at() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, e.TS)
	return t
}

// events are the structured lines in the process's output, in order; the master's own lines
// (glog) are skipped.
func (p *proc) events() []logEvent {
	var evs []logEvent
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e logEvent
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg != "" {
			e.raw = line
			evs = append(evs, e)
		}
	}
	return evs
}

// event is the last structured line with msg, if any.
func (p *proc) event(msg string) (logEvent, bool) {
	evs := p.events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Msg == msg {
			return evs[i], true
		}
	}
	return logEvent{}, false
}

// messages are the launcher's own transition messages, in order.
func (p *proc) messages() []string {
	var out []string
	for _, e := range p.events() {
		if e.Logger == "elect" {
			out = append(out, e.Msg)
		}
	}
	return out
}

// processAlive reports whether pid runs (a zombie counts as gone).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may itself hold spaces.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
