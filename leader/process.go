package leader

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"time"
)

// child is the master process: the leader of its own process group, so that one signal
// reaches whatever it starts, and so that a signal aimed at the launcher's group (a terminal's
// Ctrl-C) does not reach it behind the launcher's back: the launcher decides the order.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
	// state is the exit status, set before done is closed.
	state *os.ProcessState
}

// startChild starts argv with this process's environment and the given output.
func startChild(argv []string, stdout, stderr io.Writer) (*child, error) {
	if errPlatform != nil {
		return nil, errPlatform
	}
	if len(argv) == 0 {
		return nil, errors.New("no command")
	}
	// No context: the master is stopped by Stop or Kill, in the order the launcher chooses.
	cmd := exec.CommandContext(context.Background(), argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		close(c.done)
	}()
	return c, nil
}

// Pid is the child's process id (and its process group id).
func (c *child) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (c *child) Done() <-chan struct{} { return c.done }

// ExitCode is the child's exit status once Done is closed: its code, or 128+N when signal N
// ended it (the shell's convention, which the kubelet reports too).
func (c *child) ExitCode() int {
	<-c.done
	return exitCode(c.state)
}

// Stop sends SIGTERM to the child's group and waits up to grace for the child to exit, then
// SIGKILLs the group. It returns once the child is reaped; anything left in the group is
// SIGKILLed too.
func (c *child) Stop(grace time.Duration) {
	signalGroup(c.Pid(), sigTerm)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		signalGroup(c.Pid(), sigKill)
		<-c.done
	}
	signalGroup(c.Pid(), sigKill)
}

// Kill SIGKILLs the child's group and waits until the child is reaped.
func (c *child) Kill() {
	signalGroup(c.Pid(), sigKill)
	<-c.done
}
