package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-operator/kvcache/member"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// execMember replaces this process with the member; a variable so that tests see what would
// run.
var execMember = syscall.Exec

// defaultMemberRunWait bounds the wait for a master that serves: a container that exits is
// restarted, and its restart count shows a store that stays without a master.
const defaultMemberRunWait = 10 * time.Minute

func newMemberRunCommand() *cobra.Command {
	var (
		admin, podIP, portRange string
		wait                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   vocab.MemberRunCommand + " [flags] -- " + vocab.MemberCommand + " [ARGS...]",
		Short: "Start a store member under a segment name the serving master has never seen",
		Long: `member-run is a store member container's entrypoint. It waits until a master serves,
reads every segment name that master knows for this Pod's IP (the mounted ones from
/get_segments_detail and, from the segment label of /metrics, those only its index holds, such as
a member that died across a failover), picks a port in --port-range that is in none of them, sets
` + vocab.LocalHostnameEnv + `=<Pod IP>:<port> ([<Pod IP>]:<port> for IPv6) and replaces itself with
the command after -- (exec: the member keeps this process's PID and receives its signals).

A restored index keeps the objects of a member that died across a failover. A new member mounting
under the same name, its memory where the old one's was, would have them read back as whatever
that memory holds, with a success code; under a fresh name they stay unreadable and miss.

It writes one JSON line naming the chosen name and the names avoided (msg "member-run-chose"),
and one per change of what it waits for. Missing configuration exits 2 and a failure to choose
(no master within --wait, every port of the range taken) exits 1, without starting the member;
SIGTERM or SIGINT while waiting exits 0.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return usageErrorf("member-run needs the member command after --: kvcache member-run -- %s --port=N ...", vocab.MemberCommand)
			}
			if missing := memberConfigMissing(vocab.MemberRunCommand, admin, podIP); missing != "" {
				return usageErrorf("%s; the member was not started", missing)
			}
			lo, hi, err := parsePortRange(portRange)
			if err != nil {
				return usageErrorf("--port-range %q: %v", portRange, err)
			}
			if wait < 0 {
				return usageErrorf("--wait %s: must not be negative", wait)
			}
			path, err := exec.LookPath(args[0])
			if err != nil {
				return usageErrorf("the member command after --: %v (name an executable, or a program on $PATH); the member was not started", err)
			}
			log := slog.New(slog.NewJSONHandler(cmd.OutOrStdout(), nil)).With("component", vocab.MemberRunCommand, "pod_ip", podIP)

			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if wait > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			f, err := member.FreshName(ctx, member.FreshConfig{
				Admin: store.New(adminURL(admin)), PodIP: podIP, MinPort: lo, MaxPort: hi, Log: log,
			})
			if errors.Is(err, context.Canceled) {
				log.Info("member-run-stopped", "reason", "signalled while waiting for a master; the member was not started")
				return nil
			}
			if err != nil {
				log.Error("member-run-failed", "error", err.Error(), "message", "the member was not started")
				return failureErrorf(exitFailure, "member-run: %v; the member was not started", err)
			}
			attrs := []any{"name", f.Name, "avoided_mounted", nonNil(f.Live), "avoided_indexed", nonNil(f.Dead),
				"port_range", fmt.Sprintf("%d-%d", lo, hi), "waited", f.Waited.Round(time.Millisecond).String(), "attempts", f.Attempts,
				"exec", args}
			if prev, ok := os.LookupEnv(vocab.LocalHostnameEnv); ok {
				attrs = append(attrs, "replaced_"+strings.ToLower(vocab.LocalHostnameEnv), prev)
			}
			log.Info("member-run-chose", attrs...)

			// Signals that arrive from here on reach the member, which takes over this PID:
			// exec resets handled signals to their defaults.
			stop()
			env := withEnv(os.Environ(), vocab.LocalHostnameEnv, f.Name)
			if err := execMember(path, args, env); err != nil {
				return failureErrorf(exitFailure, "member-run: exec %s: %v", path, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&admin, "master-admin", os.Getenv(vocab.DrainAdminEnv), "the master's admin address, host:port or http(s)://host:port (default: $"+vocab.DrainAdminEnv+")")
	f.StringVar(&podIP, "pod-ip", os.Getenv(vocab.DrainPodIPEnv), "this member Pod's IP, the host part of its segment name (default: $"+vocab.DrainPodIPEnv+")")
	f.StringVar(&portRange, "port-range", fmt.Sprintf("%d-%d", member.DefaultFreshMinPort, member.DefaultFreshMaxPort),
		"MIN-MAX, the ports the segment name may take (a label: nothing listens on it); member groups whose Pods share an IP (host networking) need disjoint ranges")
	f.DurationVar(&wait, "wait", defaultMemberRunWait, "give up, exiting 1 without starting the member, when no master has served for this long; 0: wait for ever")
	return cmd
}

// parsePortRange reads MIN-MAX (or a single port).
func parsePortRange(s string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, errors.New("want MIN-MAX, two port numbers")
	case lo < 1 || hi > 65535 || lo > hi:
		return 0, 0, errors.New("want 1 <= MIN <= MAX <= 65535")
	}
	return lo, hi, nil
}

// withEnv is env with key set to value, replacing every earlier setting of it.
func withEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			continue
		}
		out = append(out, kv)
	}
	return append(out, key+"="+value)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
