package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/vocab"
)

// execCall is what member-run would have exec'd.
type execCall struct {
	path string
	args []string
	env  []string
}

// stubExec replaces the exec for the test and returns what it was called with (nil: never).
func stubExec(t *testing.T, err error) **execCall {
	t.Helper()
	var got *execCall
	prev := execMember
	execMember = func(path string, args, env []string) error {
		got = &execCall{path, args, env}
		return err
	}
	t.Cleanup(func() { execMember = prev })
	return &got
}

// fakeMember is an executable file standing in for the member command.
func fakeMember(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), vocab.MemberCommand)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	return p
}

// servingMaster answers as a 0.3.13.post1 master that serves, with one mounted and one dead
// segment of 10.0.0.7 and one of another host.
func servingMaster(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			_, _ = fmt.Fprint(w, `{"status":"ok","role":"leader","ha_state":"serving","service_ready":true}`)
		case "/get_segments_detail":
			_, _ = fmt.Fprint(w, `{"total_segments":2,"segments":[{"segment_name":"10.0.0.7:13000","te_endpoint":"10.0.0.7:15001"},{"segment_name":"10.0.0.8:13002","te_endpoint":"10.0.0.8:15001"}]}`)
		case "/metrics":
			_, _ = fmt.Fprint(w, "# TYPE segment_allocated_bytes gauge\nsegment_allocated_bytes{segment=\"10.0.0.7:13000\"} 0\nsegment_allocated_bytes{segment=\"10.0.0.7:13001\"} 6553600\nsegment_allocated_bytes{segment=\"10.0.0.8:13002\"} 0\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://") // host:port, as the templates write it
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var ls []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &e), "not a JSON line: %q", l)
		ls = append(ls, e)
	}
	return ls
}

func TestMemberRunChoosesAFreshNameAndExecs(t *testing.T) {
	t.Setenv(vocab.DrainAdminEnv, servingMaster(t))
	t.Setenv(vocab.DrainPodIPEnv, "10.0.0.7")
	t.Setenv(vocab.LocalHostnameEnv, "10.0.0.7") // as the template sets it, from status.podIP
	got := stubExec(t, nil)
	member := fakeMember(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{vocab.MemberRunCommand, "--port-range=13000-13002", "--", member, "--port=8080"}, nil, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.NotNil(t, *got, "the member is exec'd")
	c := **got
	assert.Equal(t, member, c.path)
	assert.Equal(t, []string{member, "--port=8080"}, c.args)
	var hostnames []string
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, vocab.LocalHostnameEnv+"="); ok {
			hostnames = append(hostnames, v)
		}
	}
	assert.Equal(t, []string{"10.0.0.7:13002"}, hostnames, "the one port of the range no name of 10.0.0.7 has, replacing the bare IP")
	assert.Contains(t, c.env, vocab.DrainPodIPEnv+"=10.0.0.7", "the rest of the environment is kept")

	ls := jsonLines(t, stdout.String())
	require.Len(t, ls, 1, stdout.String())
	e := ls[0]
	assert.Equal(t, "member-run-chose", e["msg"])
	assert.Equal(t, "10.0.0.7:13002", e["name"])
	assert.Equal(t, []any{"10.0.0.7:13000"}, e["avoided_mounted"])
	assert.Equal(t, []any{"10.0.0.7:13001"}, e["avoided_indexed"])
	assert.Equal(t, "10.0.0.7", e["replaced_mooncake_local_hostname"])
	assert.Equal(t, "13000-13002", e["port_range"])
}

func TestMemberRunRefusesWithoutConfiguration(t *testing.T) {
	member := fakeMember(t)
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no admin, no pod IP", map[string]string{vocab.DrainAdminEnv: "", vocab.DrainPodIPEnv: ""}, []string{"--", member},
			"member-run needs the master's admin address (--master-admin or $KVCACHE_MASTER_ADMIN) and this Pod's IP (--pod-ip or $KVCACHE_POD_IP, from the downward API's status.podIP); the member was not started"},
		{"no pod IP", map[string]string{vocab.DrainAdminEnv: "master:9003", vocab.DrainPodIPEnv: ""}, []string{"--", member},
			"this Pod's IP (--pod-ip or $KVCACHE_POD_IP"},
		{"no member command", map[string]string{vocab.DrainAdminEnv: "master:9003", vocab.DrainPodIPEnv: "10.0.0.7"}, nil,
			"member-run needs the member command after --"},
		{"member command without --", map[string]string{vocab.DrainAdminEnv: "master:9003", vocab.DrainPodIPEnv: "10.0.0.7"}, []string{member},
			"member-run needs the member command after --"},
		{"no such member", map[string]string{vocab.DrainAdminEnv: "master:9003", vocab.DrainPodIPEnv: "10.0.0.7"}, []string{"--", filepath.Join(t.TempDir(), "absent")},
			"the member command after --"},
		{"bad range", map[string]string{vocab.DrainAdminEnv: "master:9003", vocab.DrainPodIPEnv: "10.0.0.7"}, []string{"--port-range=14000-13000", "--", member},
			`--port-range "14000-13000": want 1 <= MIN <= MAX <= 65535`},
		{"range not numbers", map[string]string{vocab.DrainAdminEnv: "master:9003", vocab.DrainPodIPEnv: "10.0.0.7"}, []string{"--port-range=low-high", "--", member},
			"want MIN-MAX"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			got := stubExec(t, nil)
			var stdout, stderr bytes.Buffer
			code := run(append([]string{vocab.MemberRunCommand}, c.args...), nil, &stdout, &stderr)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr.String(), c.want)
			assert.Nil(t, *got, "the member is not started")
		})
	}
}

// A Pod IP that is not an address, no master within --wait, or every port of the range known:
// exit 1 without starting the member, the reason in a JSON line and on stderr.
func TestMemberRunFailsWithoutStartingTheMember(t *testing.T) {
	admin := servingMaster(t)
	notServing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer notServing.Close()
	member := fakeMember(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"hostname", []string{"--master-admin=" + admin, "--pod-ip=member-0"}, `pod IP "member-0" is not an IP address`},
		{"no master serves", []string{"--master-admin=" + notServing.URL, "--pod-ip=10.0.0.7", "--wait=700ms"}, "no master served within"},
		{"range exhausted", []string{"--master-admin=" + admin, "--pod-ip=10.0.0.7", "--port-range=13000-13001"}, "all 2 ports are in names the master knows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := stubExec(t, nil)
			var stdout, stderr bytes.Buffer
			code := run(append(append([]string{vocab.MemberRunCommand}, c.args...), "--", member), nil, &stdout, &stderr)
			assert.Equal(t, exitFailure, code)
			assert.Contains(t, stderr.String(), c.want)
			assert.Contains(t, stderr.String(), "the member was not started")
			assert.Nil(t, *got, "the member is not started")
			ls := jsonLines(t, stdout.String())
			require.NotEmpty(t, ls)
			assert.Equal(t, "member-run-failed", ls[len(ls)-1]["msg"])
		})
	}
}

func TestMemberRunExecFailure(t *testing.T) {
	stubExec(t, errors.New("exec format error"))
	var stdout, stderr bytes.Buffer
	code := run([]string{vocab.MemberRunCommand, "--master-admin=" + servingMaster(t), "--pod-ip=10.0.0.7", "--", fakeMember(t)}, nil, &stdout, &stderr)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr.String(), "exec format error")
}

func TestWithEnv(t *testing.T) {
	assert.Equal(t, []string{"A=1", "C=3", "B=new"}, withEnv([]string{"A=1", "B=2", "C=3", "B=4"}, "B", "new"))
	assert.Equal(t, []string{"BB=1", "B=x"}, withEnv([]string{"BB=1"}, "B", "x"))
}
