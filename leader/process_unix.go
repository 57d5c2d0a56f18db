//go:build unix

package leader

import (
	"os"
	"syscall"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// errPlatform is nil: process groups are there.
var errPlatform error

// signalGroup signals the process group led by pid. ESRCH (the group is gone) is not an
// error worth reporting: the caller waits for the child itself.
func signalGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}

func exitCode(s *os.ProcessState) int {
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return s.ExitCode()
}
