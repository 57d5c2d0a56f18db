package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kvcache-operator/kvcache/member"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

func newDrainMemberCommand() *cobra.Command {
	var (
		admin, podIP, logFile string
		memberPID             int
		c                     member.Config
	)
	cmd := &cobra.Command{
		Use:   vocab.DrainMemberCommand,
		Short: "Move this store member's objects to the other members before it stops (its preStop hook)",
		Long: `drain-member runs inside a store member Pod as its preStop hook. It finds the member's
segments on the master (named <Pod IP>:<port>), creates one drain job moving their objects to
every other member's segment, and polls it until it SUCCEEDED or FAILED or --deadline passed. It
writes one JSON line per change of the job's status and a final line (msg "drain-done") saying
what moved, what did not and why.

It exits 0 whatever happens, the master unreachable or the segment already gone included: the
Pod must stop, and what could not move is reported, not waited for. Only malformed flags exit 2.
A master that does not answer for 10 s has restarted or gone, and then holds none of the
member's objects anyway.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			var fileErr error
			if logFile != "" {
				// The kubelet discards what a successful exec hook prints: a copy to the member
				// process's own stdout (/proc/1/fd/1) lands in the container's log.
				f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					fileErr = err
				} else {
					defer func() { _ = f.Close() }()
					out = io.MultiWriter(out, f)
				}
			}
			c.Log = slog.New(slog.NewJSONHandler(out, nil)).With("component", vocab.DrainMemberCommand, "pod_ip", podIP)
			if fileErr != nil {
				c.Log.Warn("drain-log-file", "error", fileErr.Error(), "reason", "the lines go to stdout only")
			}
			if missing := memberConfigMissing(vocab.DrainMemberCommand, admin, podIP); missing != "" {
				c.Log.Error("drain-done", "result", "not-configured", "message", missing+"; nothing moved")
				return nil
			}
			c.Admin, c.PodIP = store.New(adminURL(admin)), podIP
			if memberPID > 0 {
				ports, err := member.ListeningPorts(memberPID)
				if err != nil {
					c.Log.Warn("drain-ports-unknown", "member_pid", memberPID, "error", err.Error(),
						"reason", "this member's segments are told by the Pod IP alone, which members sharing the IP (host networking) also have")
				} else {
					c.Ports = ports
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			member.Drain(ctx, c)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&admin, "master-admin", os.Getenv(vocab.DrainAdminEnv), "the master's admin address, host:port or http(s)://host:port (default: $"+vocab.DrainAdminEnv+")")
	f.StringVar(&podIP, "pod-ip", os.Getenv(vocab.DrainPodIPEnv), "this member Pod's IP, the host part of its segment names (default: $"+vocab.DrainPodIPEnv+")")
	f.IntVar(&memberPID, "member-pid", 1, "the member process, whose listening ports tell its segments apart from another member's on the same IP; 0: by the IP alone")
	f.IntVar(&c.MaxConcurrency, "max-concurrency", member.DefaultMaxConcurrency, "the drain job's max_concurrency: the master moves about one object per second per unit, at most 16 per second")
	f.DurationVar(&c.Deadline, "deadline", member.DefaultDeadline, "give up waiting after this long, what has not moved staying behind; keep it below the Pod's terminationGracePeriodSeconds")
	f.BoolVar(&c.Warm, "warm", false, "the store fails over warm (electionBackend: Etcd): wait for a new master through a failover and drain again there")
	f.StringVar(&logFile, "log-file", "", "also append the JSON lines to this file, e.g. /proc/1/fd/1 (the container's log)")
	return cmd
}

// memberConfigMissing names what command, run in a member Pod (drain-member, member-run), cannot
// run without, or "".
func memberConfigMissing(command, admin, podIP string) string {
	var missing []string
	if admin == "" {
		missing = append(missing, fmt.Sprintf("the master's admin address (--master-admin or $%s)", vocab.DrainAdminEnv))
	}
	if podIP == "" {
		missing = append(missing, fmt.Sprintf("this Pod's IP (--pod-ip or $%s, from the downward API's status.podIP)", vocab.DrainPodIPEnv))
	}
	if len(missing) == 0 {
		return ""
	}
	return command + " needs " + strings.Join(missing, " and ")
}

// adminURL accepts host:port as the templates write it, or a URL.
func adminURL(admin string) string {
	if strings.Contains(admin, "://") {
		return admin
	}
	return "http://" + admin
}
