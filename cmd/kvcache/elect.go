package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kvcache-operator/kvcache/leader"
	"github.com/kvcache-operator/kvcache/vocab"
)

// exitFailure is a launcher that ran and ended badly: it lost the Lease, or could not start.
const exitFailure = 1

func failureErrorf(code int, format string, a ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, a...)}
}

func newElectCommand() *cobra.Command {
	c := leader.Config{}
	var kubeconfig string
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "elect [flags] -- MASTER_COMMAND [ARGS...]",
		Short: "Run a stock mooncake_master only while this Pod holds the backend's Lease",
		Long: `elect campaigns for a coordination.k8s.io/v1 Lease and runs the command after -- (the
master) only while it holds it. A standby runs no master, so the master's readiness probe fails
and the leader Service routes only to the serving one.

On SIGTERM or SIGINT the master is stopped (SIGTERM, then SIGKILL after --stop-grace), the Pod's
` + vocab.LabelStoreLeader + ` label is set to "false", then the Lease is released, and elect
exits 0 after --linger. On a lost Lease the master is killed at once and elect exits 1. When the master exits
by itself, the Lease is released and elect exits with the master's code (1 if it was 0).

With --peer-port the backend's launchers also talk to each other: a leader whose renewals fail
keeps its master while a standby renews the Lease on its behalf, or, when no launcher reaches the
API server, while every standby it acknowledged promises not to take over (at most --max-hold).

A leader whose Pod reads Ready=False for --unserved-grace, or is being deleted, hands over as on
SIGTERM and exits 1: the leader Service does not route to its master.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return usageErrorf("elect needs the master command after --: kvcache elect --lease-name NAME -- mooncake_master -rpc_port=50051 ...")
			}
			c.Command = args
			if c.LeaseName == "" {
				return usageErrorf("--lease-name is required: the backend's Lease, <backend>-leader")
			}
			if c.LeaseNamespace == "" {
				return usageErrorf("--lease-namespace is empty and $POD_NAMESPACE is unset: name the namespace the Lease lives in")
			}
			if c.Identity == "" {
				return usageErrorf("--identity is empty and $POD_NAME is unset: the Lease holder must name this Pod")
			}
			if c.PodName != "" && c.PodNamespace == "" {
				return usageErrorf("--pod-name %q without a namespace: set --pod-namespace or $POD_NAMESPACE", c.PodName)
			}
			if c.Linger < 0 {
				return usageErrorf("--linger %s: must not be negative", c.Linger)
			}
			if err := leader.ValidateTiming(c.LeaseDuration, c.RenewDeadline, c.RetryPeriod, c.StopGrace); err != nil {
				return usageErrorf("%v", err)
			}
			if err := leader.ValidatePeers(c.PeerPort, c.PodName, c.MaxHold); err != nil {
				return usageErrorf("%v (--peer-port, --pod-name, --max-hold)", err)
			}
			if _, err := exec.LookPath(c.Command[0]); err != nil {
				return usageErrorf("the master command after --: %v (name an executable, or a program on $PATH)", err)
			}
			cfg, err := electRestConfig(kubeconfig)
			if err != nil {
				return usageErrorf("no cluster to talk to: %v (in a Pod the service account is used; outside, pass --kubeconfig)", err)
			}
			// A request that hangs (a half-open connection) must not stall a standby's
			// campaign for longer than a leader tolerates failing renewals.
			cfg.Timeout = c.RenewDeadline
			c.Client, err = kubernetes.NewForConfig(cfg)
			if err != nil {
				return usageErrorf("API client: %v", err)
			}
			c.Stdout, c.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			c.Log = zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(cmd.ErrOrStderr())).WithName("elect")

			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return electExit(leader.Run(ctx, c))
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.LeaseName, "lease-name", "", "the Lease to campaign for: the backend's <backend>-leader")
	f.StringVar(&c.LeaseNamespace, "lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease (default: $POD_NAMESPACE)")
	f.StringVar(&c.Identity, "identity", os.Getenv("POD_NAME"), "holder identity written to the Lease; the Pod's name, so the holder names the Pod (default: $POD_NAME)")
	f.StringVar(&c.PodName, "pod-name", os.Getenv("POD_NAME"), "this launcher's Pod, labelled "+vocab.LabelStoreLeader+"=true while it leads, false otherwise; empty: no label (default: $POD_NAME)")
	f.StringVar(&c.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "namespace of --pod-name (default: $POD_NAMESPACE)")
	f.DurationVar(&c.LeaseDuration, "lease-duration", leader.DefaultLeaseDuration, "how long a standby waits on a Lease that is not renewed before it takes over (whole seconds)")
	f.DurationVar(&c.RenewDeadline, "renew-deadline", leader.DefaultRenewDeadline, "how long the leader tolerates failing renewals before it kills its master; less than --lease-duration")
	f.DurationVar(&c.RetryPeriod, "retry-period", leader.DefaultRetryPeriod, "how often the leader renews and standbys retry; --renew-deadline must exceed 1.2 times it")
	f.DurationVar(&c.StopGrace, "stop-grace", leader.DefaultStopGrace, "how long a graceful stop waits after SIGTERM before it SIGKILLs the master")
	f.DurationVar(&c.Linger, "linger", leader.DefaultLinger, "how long a leader that handed over gracefully stays up with its master stopped, so connections to its Pod are refused (and retried) rather than dropped until a standby serves")
	f.IntVar(&c.PeerPort, "peer-port", 0, "port the backend's launchers talk to each other on, so that a leader whose renewals fail while the API server is away for everyone keeps its master; 0: none (the master is killed at --renew-deadline whatever the cause)")
	f.StringVar(&c.PeerAddress, "peer-address", "", "address to listen on for peers and, when it names an IP, to call them from (default: every interface on --peer-port)")
	f.DurationVar(&c.MaxHold, "max-hold", leader.DefaultMaxHold, "how long past its last renewal a leader keeps its master on its peers' promises alone; a peer the leader never acknowledged waits this much longer before taking over")
	f.DurationVar(&c.UnservedGrace, "unserved-grace", leader.DefaultUnservedGrace, "how long the leading launcher's Pod may read Ready=False before it hands over (the leader Service does not route to its master); a Pod being deleted or gone hands over at once; 0: never")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for out-of-cluster runs; in a Pod the service account is used")
	// The same logging flags and JSON lines as the manager (--zap-log-level, --zap-encoder, ...).
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	zapOpts.BindFlags(zapFlags)
	// Transitions a second apart must read in order: nanosecond timestamps unless told otherwise.
	_ = zapFlags.Set("zap-time-encoding", "rfc3339nano")
	f.AddGoFlagSet(zapFlags)
	if te := f.Lookup("zap-time-encoding"); te != nil {
		te.Usage = "Zap time encoding (one of 'epoch', 'millis', 'nano', 'iso8601', 'rfc3339' or 'rfc3339nano')"
	}
	return cmd
}

func electRestConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// electExit turns how the launcher ended into the process's exit code: 0 after a graceful stop,
// the master's own code when it exited by itself (never 0: the container must restart), 1
// otherwise.
func electExit(err error) error {
	if err == nil {
		return nil
	}
	var me *leader.MasterExitError
	if errors.As(err, &me) {
		code := me.Code
		if code == 0 {
			code = exitFailure
		}
		return failureErrorf(code, "elect: %v", err)
	}
	return failureErrorf(exitFailure, "elect: %v", err)
}

func newCopySelfCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "copy-self PATH",
		Short: "Copy this kvcache binary to PATH (mode 0755, atomically)",
		Long: `copy-self copies the running kvcache executable to PATH. An init container from the
operator's image runs it to put kvcache into a shared volume, so that the unmodified store image
can run "kvcache elect" beside its own programs. PATH appears complete or not at all.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("copy-self takes one argument, the destination path (for example /opt/kvcache/kvcache); got %d", len(args))
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if err := copySelf(args[0]); err != nil {
				return failureErrorf(exitFailure, "copy-self: %v", err)
			}
			return nil
		},
	}
}

// copySelf writes the running executable to dst through a temporary file in dst's directory,
// renamed into place once complete, so a reader never sees half a binary.
func copySelf(dst string) (err error) {
	src, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the running executable: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, tmp.Name(), err)
	}
	if err = tmp.Chmod(0o755); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
