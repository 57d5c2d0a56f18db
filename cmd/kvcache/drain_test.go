package main

import (
	"bytes"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/internal/golden"
	"github.com/kvcache-operator/kvcache/vocab"
)

// finalLine is the last JSON line drain-member wrote, which must be its "drain-done".
func finalLine(t *testing.T, out string) map[string]any {
	t.Helper()
	ls := strings.Split(strings.TrimSpace(out), "\n")
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(ls[len(ls)-1]), &e), "not a JSON line: %q", ls[len(ls)-1])
	require.Equal(t, "drain-done", e["msg"], out)
	return e
}

// Without its configuration the hook still exits 0, naming what it lacks.
func TestDrainMemberNotConfigured(t *testing.T) {
	t.Setenv(vocab.DrainAdminEnv, "")
	t.Setenv(vocab.DrainPodIPEnv, "")
	var stdout, stderr bytes.Buffer
	code := run([]string{"drain-member"}, nil, &stdout, &stderr)
	assert.Equal(t, 0, code, stderr.String())
	e := finalLine(t, stdout.String())
	assert.Equal(t, "not-configured", e["result"])
	assert.Equal(t, "drain-member needs the master's admin address (--master-admin or $KVCACHE_MASTER_ADMIN) and this Pod's IP (--pod-ip or $KVCACHE_POD_IP, from the downward API's status.podIP); nothing moved", e["message"])

	// Malformed flags are a broken render, refused like every kvcache usage error.
	stdout.Reset()
	code = run([]string{"drain-member", "--deadline=soon"}, nil, &stdout, &stderr)
	assert.Equal(t, exitUsage, code)
}

// A master that refuses connections, and one that accepts and never answers: the hook gives up
// after DefaultMasterWait and exits 0, whatever its deadline.
func TestDrainMemberUnreachableMaster(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusing := closed.Addr().String()
	require.NoError(t, closed.Close())

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		var held []net.Conn // accepted and never answered, like a master that hangs
		for {
			c, err := silent.Accept()
			if err != nil {
				for _, c := range held {
					_ = c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()

	for name, addr := range map[string]string{"refusing": refusing, "silent": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits out the master's patience
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := run([]string{"drain-member", "--master-admin=" + addr, "--pod-ip=10.0.0.7", "--member-pid=0", "--deadline=5m"}, nil, &stdout, &stderr)
			took := time.Since(start)
			t.Logf("%s master: drain-member exited %d after %s", name, code, took.Round(time.Millisecond))
			assert.Equal(t, 0, code, stderr.String())
			assert.Less(t, took, 17*time.Second, "DefaultMasterWait (10 s) plus at most one call's timeout (5 s)")
			e := finalLine(t, stdout.String())
			assert.Equal(t, "master-unreachable", e["result"])
			assert.Contains(t, e["message"], "the master did not answer for 10s")
			assert.Contains(t, stdout.String(), `"msg":"master-not-answering"`)
		})
	}
}

// A deadline shorter than the master's patience ends the hook at the deadline.
func TestDrainMemberDeadlineBeforeMasterWait(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := closed.Addr().String()
	require.NoError(t, closed.Close())
	var stdout bytes.Buffer
	start := time.Now()
	code := run([]string{"drain-member", "--master-admin=http://" + addr, "--pod-ip=10.0.0.7", "--member-pid=0", "--deadline=" + strconv.Itoa(2) + "s"}, nil, &stdout, &stdout)
	assert.Equal(t, 0, code)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, "deadline", finalLine(t, stdout.String())["result"])
}

// What the member template renders is what this binary reads: the hook runs the copied binary's
// drain-member with flags it parses, within the Pod's grace period, with both variables set.
func TestRenderedPreStopRunsThisDrain(t *testing.T) {
	sets := renderedMemberSets(t, "mixed-protocols")
	for _, ds := range sets {
		spec := ds.Spec.Template.Spec
		require.Len(t, spec.InitContainers, 1, ds.Name)
		copier := spec.InitContainers[0]
		require.Len(t, spec.Containers, 1, ds.Name)
		member := spec.Containers[0]
		hook := member.Lifecycle.PreStop.Exec.Command

		assert.Equal(t, []string{"copy-self", hook[0]}, copier.Args, "the init container copies the binary the hook runs")
		assert.Equal(t, vocab.LauncherDir, copier.VolumeMounts[0].MountPath)
		assert.Equal(t, vocab.LauncherDir, member.VolumeMounts[0].MountPath)
		assert.True(t, member.VolumeMounts[0].ReadOnly)
		require.Equal(t, vocab.DrainMemberCommand, hook[1])

		cmd := newDrainMemberCommand()
		require.NoError(t, cmd.ParseFlags(hook[2:]), "the hook's flags parse: %v", hook)
		deadline, err := cmd.Flags().GetDuration("deadline")
		require.NoError(t, err)
		require.NotNil(t, spec.TerminationGracePeriodSeconds)
		assert.Equal(t, deadline+20*time.Second, time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second, "the grace period is the deadline plus the margin")
		logFile, err := cmd.Flags().GetString("log-file")
		require.NoError(t, err)
		assert.Equal(t, "/proc/1/fd/1", logFile)
		warm, err := cmd.Flags().GetBool("warm")
		require.NoError(t, err)
		assert.False(t, warm, "a store that fails over cold: a master that stops answering held nothing to wait for")

		env := map[string]corev1.EnvVar{}
		for _, e := range member.Env {
			env[e.Name] = e
		}
		assert.Equal(t, "mooncake-mixed-leader.gpustack-system.svc:9003", env[vocab.DrainAdminEnv].Value)
		assert.Equal(t, "http://mooncake-mixed-leader.gpustack-system.svc:9003", adminURL(env[vocab.DrainAdminEnv].Value))
		assert.Equal(t, "status.podIP", env[vocab.DrainPodIPEnv].ValueFrom.FieldRef.FieldPath)
	}
	assert.Len(t, sets, 2)
}

// A warm store's members wait for the new master of a failover during their drain, and drain
// again there.
func TestRenderedWarmPreStopWaitsForTheNewMaster(t *testing.T) {
	sets := renderedMemberSets(t, "warm-failover")
	require.NotEmpty(t, sets)
	for _, ds := range sets {
		hook := ds.Spec.Template.Spec.Containers[0].Lifecycle.PreStop.Exec.Command
		cmd := newDrainMemberCommand()
		require.NoError(t, cmd.ParseFlags(hook[2:]), "the hook's flags parse: %v", hook)
		warm, err := cmd.Flags().GetBool("warm")
		require.NoError(t, err)
		assert.True(t, warm, "%s: %v", ds.Name, hook)
	}
}

// renderedMemberSets are the member DaemonSets `kvcache render` writes for the store snapshot
// input named.
func renderedMemberSets(t *testing.T, input string) []appsv1.DaemonSet {
	t.Helper()
	code, out, errOut := kvcache(t, "", "render", "-f", filepath.Join(golden.Dir("store"), input+".input.yaml"), "-o", "json")
	require.Equal(t, 0, code, errOut)
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	var sets []appsv1.DaemonSet
	for _, raw := range list.Items {
		var ds appsv1.DaemonSet
		require.NoError(t, json.Unmarshal(raw, &ds))
		if ds.Kind == "DaemonSet" {
			sets = append(sets, ds)
		}
	}
	return sets
}
