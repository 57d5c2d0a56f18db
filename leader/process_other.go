//go:build !unix

package leader

import (
	"errors"
	"os"
	"syscall"
)

// Without Unix process groups the master cannot be stopped as a group; the launcher is meant
// for the store's Linux container, so it refuses to start one here.

type signal int

const (
	sigTerm signal = iota
	sigKill
)

var errPlatform = errors.New("kvcache elect runs the master in its own process group, which needs a Unix system")

func groupAttr() *syscall.SysProcAttr { return nil }

func signalGroup(pid int, sig signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func exitCode(s *os.ProcessState) int { return s.ExitCode() }
