// Command kvcache is the one binary of kvcache-operator: `render` and `inject` emit for review
// exactly what the operator and the admission webhook would write; `manager` runs them.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes: 1 for input that was read and judged invalid (or refused), 2 for usage errors and
// input that could not be read at all.
const (
	exitInvalid = 1
	exitUsage   = 2
)

// exitError carries an exit code and a message for stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, a...)}
}

func invalidErrorf(format string, a ...any) error {
	return &exitError{code: exitInvalid, msg: fmt.Sprintf(format, a...)}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "kvcache",
		Short:         "kvcache-operator: a shared Mooncake KV cache for LLM inference engines on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErrorf("%v", err) })
	root.AddCommand(newRenderCommand(), newInjectCommand(), newManagerCommand(), newVersionCommand(), newElectCommand(), newCopySelfCommand(), newDrainMemberCommand(), newCheckCommand(), newMemberRunCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version)
			return err
		},
	}
}

// run executes the CLI and returns the process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprintln(stderr, ee.msg)
		return ee.code
	}
	// cobra's own errors (unknown command, bad args) are usage errors.
	fmt.Fprintf(stderr, "error: %v\n", err)
	return exitUsage
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// printOnSuccess runs a command that builds its whole output first and writes it to stdout only
// when it succeeded, so a failure never leaves half a stream behind.
func printOnSuccess(run func(*cobra.Command) ([]byte, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		out, err := run(cmd)
		if err != nil {
			return err
		}
		_, err = cmd.OutOrStdout().Write(out)
		return err
	}
}
