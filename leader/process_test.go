//go:build unix

package leader

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
)

// alive reports whether pid names a process that has not exited (a zombie counts as gone).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill(0)
	}
	fields := strings.Fields(string(stat))
	return len(fields) < 3 || fields[2] != "Z"
}

func TestChildStopEndsAChildThatHonoursSIGTERMWithoutWaitingForTheGrace(t *testing.T) {
	c, err := startChild([]string{"sleep", "30"}, nil, nil)
	require.NoError(t, err)
	start := time.Now()
	c.Stop(10 * time.Second)
	assert.Less(t, time.Since(start), 5*time.Second, "sleep dies of SIGTERM at once")
	assert.Equal(t, 128+int(syscall.SIGTERM), c.ExitCode())
}

func TestChildStopKillsAChildThatIgnoresSIGTERMAfterTheGrace(t *testing.T) {
	var out mooncaketest.SyncBuffer
	// The shell ignores SIGTERM and so does the sleep it starts (an ignored signal stays
	// ignored across exec); "ready" says the trap is in place.
	c, err := startChild([]string{"sh", "-c", `trap "" TERM; echo ready; sleep 30`}, &out, &out)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ready") }, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	c.Stop(500 * time.Millisecond)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 500*time.Millisecond, "SIGKILL only after the grace")
	assert.Less(t, took, 5*time.Second)
	assert.Equal(t, 128+int(syscall.SIGKILL), c.ExitCode())
}

func TestChildStopReachesTheWholeProcessGroup(t *testing.T) {
	var out mooncaketest.SyncBuffer
	// The grandchild ignores SIGTERM; the shell exits on it. Stop must still leave no process
	// of the group behind.
	c, err := startChild([]string{"sh", "-c", `(trap "" TERM; exec sleep 30) & echo "$!"; wait`}, &out, &out)
	require.NoError(t, err)
	var grandchild int
	require.Eventually(t, func() bool {
		grandchild, err = strconv.Atoi(strings.TrimSpace(out.String()))
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	require.True(t, alive(grandchild))
	c.Stop(time.Second)
	assert.Eventually(t, func() bool { return !alive(grandchild) }, 5*time.Second, 10*time.Millisecond, "the grandchild %d is gone", grandchild)
}

func TestChildKillIsImmediate(t *testing.T) {
	c, err := startChild([]string{"sh", "-c", `trap "" TERM; sleep 30`}, nil, nil)
	require.NoError(t, err)
	start := time.Now()
	c.Kill()
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, 128+int(syscall.SIGKILL), c.ExitCode())
}

func TestChildExitCodeIsTheChildsOwn(t *testing.T) {
	c, err := startChild([]string{"sh", "-c", "exit 3"}, nil, nil)
	require.NoError(t, err)
	<-c.Done()
	assert.Equal(t, 3, c.ExitCode())
}

func TestChildRunsInItsOwnProcessGroup(t *testing.T) {
	c, err := startChild([]string{"sleep", "30"}, nil, nil)
	require.NoError(t, err)
	defer c.Kill()
	pgid, err := syscall.Getpgid(c.Pid())
	require.NoError(t, err)
	assert.Equal(t, c.Pid(), pgid, "the child leads its own group")
	assert.NotEqual(t, syscall.Getpgrp(), pgid, "not the launcher's group")
}

func TestStartChildReportsAMissingCommand(t *testing.T) {
	_, err := startChild([]string{"/nonexistent/mooncake_master"}, nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/nonexistent/mooncake_master")
}
