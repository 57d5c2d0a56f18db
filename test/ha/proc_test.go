//go:build linux

package ha_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
)

// proc is a process the test starts (internal/mooncaketest's: the leader of its own process
// group, as a container's processes are apart from the test's, killed with the test binary),
// with what the launchers' structured logs say.
type proc struct {
	*mooncaketest.Proc
	name string
}

// startProc starts bin with args, without the caller's Mooncake and Pod identity variables.
// stdout, when not nil, receives the standard output instead of the collected output. The
// test's cleanup stops the process (SIGTERM, SIGKILL after 10 s) and, when the test failed,
// logs the end of its output.
func startProc(t *testing.T, name string, env []string, stdin io.Reader, stdout io.Writer, bin string, args ...string) *proc {
	t.Helper()
	return &proc{name: name, Proc: mooncaketest.StartWith(t, name, mooncaketest.Options{
		Grace: 10 * time.Second, Env: env, DropEnv: []string{"POD_NAME=", "POD_NAMESPACE="}, Stdin: stdin, Stdout: stdout,
	}, bin, args...)}
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
	sc := bufio.NewScanner(strings.NewReader(p.Output()))
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
