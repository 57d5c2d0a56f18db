package leader

import "syscall"

// groupAttr puts the master in its own process group. The parent-death signal kills the master
// should the launcher die without stopping it (SIGKILL, a crash), so a master never outlives
// the process that holds its Lease.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
