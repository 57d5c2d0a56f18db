//go:build unix && !linux

package leader

import "syscall"

// groupAttr puts the master in its own process group. Outside Linux there is no parent-death
// signal: a launcher killed outright leaves its master running.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
