// Package harness tests hack/cluster.sh's process records without a cluster: the script signals
// only processes it started, never a process that took over a recorded PID, and never a thread
// whose ID equals a recorded PID. An hour of node restarts wraps the PID space (pid_max is 32768
// on the machines this runs on), so both happen; each once killed the other node's daemons in
// the hour soak.
package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperEnv makes the test binary a long-running process with several threads, the shape of a
// kubelet or containerd: the processes the records point at.
const helperEnv = "KVCACHE_HARNESS_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		for range 3 {
			go func() {
				runtime.LockOSThread()
				select {}
			}()
		}
		time.Sleep(10 * time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// script runs one of hack/cluster.sh's functions with its state under dir.
func script(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "hack", "cluster.sh")
	cmd := exec.Command("bash", append([]string{"-c", `source "$CLUSTER_SH"; "$@"`, "harness"}, args...)...)
	// What the script starts is this binary as a helper, never its tests again.
	cmd.Env = append(os.Environ(), "CLUSTER_SH="+path, "KVCACHE_CLUSTER_DIR="+dir, helperEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// self is this test binary's path, as the script records it (symlinks resolved).
func self(t *testing.T) string {
	t.Helper()
	bin, err := os.Executable()
	require.NoError(t, err)
	bin, err = filepath.EvalSymlinks(bin)
	require.NoError(t, err)
	return bin
}

// helper starts the test binary as a helper process and returns it; it is killed at cleanup.
func helper(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	bin := self(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	// Wait for the extra threads, so a thread ID is there to pick.
	require.Eventually(t, func() bool { return len(threads(cmd.Process.Pid)) >= 3 }, 10*time.Second, 10*time.Millisecond)
	return cmd, bin
}

func threads(pid int) []int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			tids = append(tids, tid)
		}
	}
	return tids
}

// stat is /proc/ID/stat's fields from field 3 on (the name in parentheses may hold spaces).
func stat(id int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", id))
	if err != nil {
		return nil, err
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]), nil
}

// startTime is field 22 of /proc/ID/stat: clock ticks after boot, the fork's (or thread's) own.
func startTime(t *testing.T, id int) string {
	t.Helper()
	fields, err := stat(id)
	require.NoError(t, err)
	return fields[19]
}

// running: the process exists and is not a zombie.
func running(pid int) bool {
	fields, err := stat(pid)
	return err == nil && fields[0] != "Z"
}

// record writes NAME's records the way start does: run/NAME.pid and a line of run/started.
func record(t *testing.T, dir, name string, pid int, start, bin string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "run"), 0o755))
	line := fmt.Sprintf("%d %s %s", pid, start, bin)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run", name+".pid"), []byte(line+"\n"), 0o644))
	f, err := os.OpenFile(filepath.Join(dir, "run", "started"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "%s %s\n", name, line)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// stopEnds stops NAME through the script and says whether cmd ended, waiting a little for it.
func stopEnds(t *testing.T, dir, name string, cmd *exec.Cmd) bool {
	t.Helper()
	out, err := script(t, dir, "stop", name, "1")
	require.NoError(t, err, out)
	for range 30 {
		if !running(cmd.Process.Pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func TestStartRecordsThePIDAndItsStartTime(t *testing.T) {
	dir := t.TempDir()
	bin := self(t)
	out, err := script(t, dir, "start", "demo", bin)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(filepath.Join(dir, "run", "demo.pid"))
	require.NoError(t, err)
	fields := strings.Fields(string(raw))
	require.Len(t, fields, 3, "run/demo.pid is %q, want PID START BINARY", raw)
	pid, err := strconv.Atoi(fields[0])
	require.NoError(t, err)
	// Not the script's child any more: end it by PID whatever the assertions say.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.Equal(t, startTime(t, pid), fields[1], "the recorded start time is the process's own")
	require.Equal(t, bin, fields[2])
	started, err := os.ReadFile(filepath.Join(dir, "run", "started"))
	require.NoError(t, err)
	require.Equal(t, "demo "+strings.TrimSpace(string(raw))+"\n", string(started))

	out, err = script(t, dir, "alive", "demo")
	require.NoError(t, err, "alive demo: %s", out)
	out, err = script(t, dir, "stop", "demo", "1")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return !running(pid) }, 5*time.Second, 20*time.Millisecond, "stop demo ends what start demo started")
	_, err = script(t, dir, "alive", "demo")
	require.Error(t, err, "alive demo after stop")
}

func TestStopNeverSignalsAThreadWithARecordedID(t *testing.T) {
	dir := t.TempDir()
	cmd, bin := helper(t)
	tid := threads(cmd.Process.Pid)[0]
	// Everything about the record matches the thread (its ID, its own start time, the binary
	// its process runs), and kill(2) on that ID would still signal the whole helper.
	record(t, dir, "kubelet-1", tid, startTime(t, tid), bin)
	_, err := script(t, dir, "alive", "kubelet-1")
	require.Error(t, err, "a thread read as the recorded process")
	require.False(t, stopEnds(t, dir, "kubelet-1", cmd), "stop kubelet-1 ended the process whose thread %d had an old kubelet-1 PID", tid)

	// The same records naming the helper itself: stop ends it (the check above can fail).
	record(t, dir, "kubelet-0", cmd.Process.Pid, startTime(t, cmd.Process.Pid), bin)
	require.True(t, stopEnds(t, dir, "kubelet-0", cmd), "stop kubelet-0 left its own process running")
}

func TestStopNeverSignalsAProcessThatTookOverARecordedPID(t *testing.T) {
	dir := t.TempDir()
	cmd, bin := helper(t)
	pid := cmd.Process.Pid
	start, err := strconv.ParseUint(startTime(t, pid), 10, 64)
	require.NoError(t, err)
	// An earlier process of the same binary had this PID: the same ID, the same executable, an
	// earlier start. Only the start time tells the two apart.
	record(t, dir, "containerd-1", pid, strconv.FormatUint(start-1, 10), bin)
	_, err = script(t, dir, "alive", "containerd-1")
	require.Error(t, err, "a process that took over the PID read as the recorded one")
	require.False(t, stopEnds(t, dir, "containerd-1", cmd), "stop containerd-1 ended the process that now has its old PID %d", pid)

	record(t, dir, "containerd-0", pid, strconv.FormatUint(start, 10), bin)
	require.True(t, stopEnds(t, dir, "containerd-0", cmd), "stop containerd-0 left its own process running")
}

// A stateless control-plane program that exits while up waits on it is started again, as it was
// started, at most twice per up; any other program's exit still fails the wait at once.
func TestWaitForStartsAStatelessProgramAgain(t *testing.T) {
	bin := self(t)
	const killAndWait = `start "$NAME" "$BIN" --flag "two words"
for i in $(seq "$KILLS"); do
  read -r pid _ <"$(pidfile "$NAME")"; kill -9 "$pid"
  while alive "$NAME"; do sleep 0.05; done
  wait_for "the test" 10 "$NAME" alive "$NAME" || { echo "the wait failed after exit $i, restarts=${RESTARTED[$NAME]:-0}"; exit 5; }
done
read -r pid _ <"$(pidfile "$NAME")"; echo "runs: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
echo "restarts=${RESTARTED[$NAME]:-0}"; kill -9 "$pid"`
	run := func(name string, kills int) (string, error) {
		t.Helper()
		t.Setenv("NAME", name)
		t.Setenv("BIN", bin)
		t.Setenv("KILLS", strconv.Itoa(kills))
		return script(t, t.TempDir(), "eval", killAndWait)
	}

	out, err := run("kube-controller-manager", 1)
	require.NoError(t, err, out)
	require.Contains(t, out, "kube-controller-manager exited (pid ", "the exit is said")
	require.Contains(t, out, "starting kube-controller-manager again (restart 1 of at most 2 in this up")
	require.Contains(t, out, "runs: "+bin+" --flag two words \n", "started again with its own arguments")
	require.Contains(t, out, "restarts=1")

	out, err = run("coredns", 3)
	require.Error(t, err, out)
	require.Contains(t, out, "the wait failed after exit 3, restarts=2", "two restarts per up, no more")

	out, err = run("etcd", 1)
	require.Error(t, err, out)
	require.Contains(t, out, "the wait failed after exit 1, restarts=0", "a program that keeps state is not started again")
}
