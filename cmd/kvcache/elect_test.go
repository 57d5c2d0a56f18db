package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/leader"
)

func TestElectRefusesBadUsageWithExitCode2(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "no command after --", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l"},
			want: "elect needs the master command after --: kvcache elect --lease-name NAME -- mooncake_master -rpc_port=50051 ...\n"},
		{name: "the command before --", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "sleep", "--", "1"},
			want: "elect needs the master command after --: kvcache elect --lease-name NAME -- mooncake_master -rpc_port=50051 ...\n"},
		{name: "a bare -- with nothing after it", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--"},
			want: "elect needs the master command after --: kvcache elect --lease-name NAME -- mooncake_master -rpc_port=50051 ...\n"},
		{name: "no Lease name", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--", "sleep", "1"},
			want: "--lease-name is required: the backend's Lease, <backend>-leader\n"},
		{name: "no namespace anywhere", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": ""},
			args: []string{"elect", "--lease-name", "l", "--", "sleep", "1"},
			want: "--lease-namespace is empty and $POD_NAMESPACE is unset: name the namespace the Lease lives in\n"},
		{name: "no identity anywhere", env: map[string]string{"POD_NAME": "", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--", "sleep", "1"},
			want: "--identity is empty and $POD_NAME is unset: the Lease holder must name this Pod\n"},
		{name: "a Pod without a namespace", env: map[string]string{"POD_NAME": "", "POD_NAMESPACE": ""},
			args: []string{"elect", "--lease-name", "l", "--lease-namespace", "ns", "--identity", "i", "--pod-name", "p", "--", "sleep", "1"},
			want: "--pod-name \"p\" without a namespace: set --pod-namespace or $POD_NAMESPACE\n"},
		{name: "a renew deadline not below the lease duration", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--lease-duration", "5s", "--renew-deadline", "5s", "--", "sleep", "1"},
			want: "lease duration 5s must be greater than renew deadline 5s (the gap is the time a lost leader has to stop its master before a standby may start one)\n"},
		{name: "a retry period too close to the renew deadline", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--retry-period", "6s", "--", "sleep", "1"},
			want: "renew deadline 7s must be greater than 1.2 x retry period 6s\n"},
		{name: "a fractional lease duration", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--lease-duration", "9500ms", "--", "sleep", "1"},
			want: "lease duration 9.5s: must be a whole number of seconds, at least 1s (the Lease stores whole seconds)\n"},
		{name: "a duration that does not parse", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--lease-duration", "ten", "--", "sleep", "1"},
			want: "invalid argument \"ten\" for \"--lease-duration\" flag: time: invalid duration \"ten\"\n"},
		{name: "a master that is not there", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns"},
			args: []string{"elect", "--lease-name", "l", "--", "/nonexistent/mooncake_master", "-rpc_port=50051"},
			want: "the master command after --: exec: \"/nonexistent/mooncake_master\": stat /nonexistent/mooncake_master: no such file or directory (name an executable, or a program on $PATH)\n"},
		{name: "no cluster", env: map[string]string{"POD_NAME": "p", "POD_NAMESPACE": "ns", "KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""},
			args: []string{"elect", "--lease-name", "l", "--", "sleep", "1"},
			want: "no cluster to talk to: unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined (in a Pod the service account is used; outside, pass --kubeconfig)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errOut := kvcache(t, "", tc.args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			assert.Equal(t, "error: "+tc.want, errOut)
		})
	}
}

func TestElectLogsNanosecondTimestampsByDefault(t *testing.T) {
	// A handover's transitions fall within one second: they must read in order.
	te := newElectCommand().Flags().Lookup("zap-time-encoding")
	require.NotNil(t, te, "elect has the manager's zap flags")
	assert.Equal(t, "rfc3339nano", te.DefValue)
}

func TestElectExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int // 0: no error
	}{
		{name: "a graceful stop exits 0", err: nil},
		{name: "a lost Lease exits 1", err: fmt.Errorf("%w: no successful renewal for 7s", leader.ErrLeaseLost), code: 1},
		{name: "a master that failed exits with its code", err: &leader.MasterExitError{Code: 3}, code: 3},
		{name: "a master killed by a signal exits 128+N", err: &leader.MasterExitError{Code: 137}, code: 137},
		{name: "a master that exited 0 while leading still exits non-zero, so the container restarts", err: &leader.MasterExitError{Code: 0}, code: 1},
		{name: "a launcher that could not start exits 1", err: errors.New("labelling Pod: forbidden"), code: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := electExit(tc.err)
			if tc.code == 0 {
				require.NoError(t, err)
				return
			}
			var ee *exitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tc.code, ee.code)
			assert.Equal(t, "elect: "+tc.err.Error(), ee.msg)
		})
	}
}

func TestCopySelfCopiesTheRunningBinaryExecutable(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "kvcache")
	code, out, errOut := kvcache(t, "", "copy-self", dst)
	require.Equal(t, 0, code, errOut)
	assert.Empty(t, out)
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the copy is the running executable, byte for byte")
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())

	// Again over the existing file (an init container that restarts): replaced, nothing left over.
	require.NoError(t, os.WriteFile(dst, []byte("stale"), 0o644))
	code, _, errOut = kvcache(t, "", "copy-self", dst)
	require.Equal(t, 0, code, errOut)
	got, err = os.ReadFile(dst)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left behind")
}

func TestCopySelfErrors(t *testing.T) {
	code, _, errOut := kvcache(t, "", "copy-self")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "error: copy-self takes one argument, the destination path (for example /opt/kvcache/kvcache); got 0\n", errOut)

	dst := filepath.Join(t.TempDir(), "missing", "kvcache")
	code, _, errOut = kvcache(t, "", "copy-self", dst)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "copy-self: open "+filepath.Dir(dst)+"/.kvcache.tmp-")
	assert.Contains(t, errOut, "no such file or directory")
}
