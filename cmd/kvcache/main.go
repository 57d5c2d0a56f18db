// Command kvcache is the one binary of kvcache-operator: `render` and `inject` emit for review
// exactly what the operator and the admission webhook would write; `manager` runs them.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

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

// versionString is the release version set at build time; a build without one (make build, go
// install) says which commit it was built from, as the Go toolchain recorded it.
func versionString() string {
	if version != "dev" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	var parts []string
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		parts = append(parts, "commit "+rev[:min(12, len(rev))])
		if settings["vcs.modified"] == "true" {
			parts = append(parts, "with uncommitted changes")
		}
		if t := settings["vcs.time"]; t != "" {
			parts = append(parts, "committed "+t)
		}
	}
	parts = append(parts, "built with "+bi.GoVersion)
	return version + " (" + strings.Join(parts, ", ") + ")"
}

// storePodCommands run inside the store's Pods, started by what the operator renders; they are
// left out of the command list a user reads (each still answers --help).
var storePodCommands = []string{"elect", "copy-self", "drain-member", "member-run"}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kvcache",
		Short: "kvcache-operator: a shared Mooncake KV cache for LLM inference engines on Kubernetes",
		Long: `kvcache-operator: a shared Mooncake KV cache for LLM inference engines on Kubernetes.

render and inject print, for review, exactly what the operator and its admission webhook write;
check diagnoses a live installation or manifests; manager runs the operator (the chart starts it).
The commands the store's own Pods run (` + strings.Join(storePodCommands, ", ") + `) are not listed; each
answers --help.`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErrorf("%v", err) })
	root.AddCommand(newRenderCommand(), newInjectCommand(), newManagerCommand(), newVersionCommand(), newElectCommand(), newCopySelfCommand(), newDrainMemberCommand(), newCheckCommand(), newMemberRunCommand())
	for _, c := range root.Commands() {
		if slices.Contains(storePodCommands, c.Name()) {
			c.Hidden = true
		}
	}
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version (the same as --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}

// lineTags start the lines that say what happened to one object (a refusal, an invalid object,
// a warning, a note on them, an error); a message that starts with none is an error, said as
// "error: ..." as kubectl says it. The lines after its first continue it, as written.
var lineTags = []string{"refused: ", "invalid: ", "warning: ", "note: ", "error: "}

func tagged(msg string) string {
	if slices.ContainsFunc(lineTags, func(t string) bool { return strings.HasPrefix(msg, t) }) {
		return msg
	}
	return "error: " + msg
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
		fmt.Fprintln(stderr, tagged(ee.msg))
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
