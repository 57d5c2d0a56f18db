//go:build linux && realstore

// Built with -tags realstore (make test does): the tests install the real store from PyPI through
// hack/mooncake.sh, which make test-unit leaves out.

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
)

// drain-member as the preStop hook runs it, against the real master and members (hack/mooncake.sh)
// when the other member lacks room: it exits 0 at its deadline, its last line saying how many
// bytes could not move, the same lines appended to --log-file.
func TestDrainMemberWithoutRoom(t *testing.T) {
	bin := mooncaketest.Bin(t, "python")
	m := mooncaketest.StartMaster(t, bin, mooncaketest.MasterOptions{Tenants: []string{"team-a"}})
	a, _ := mooncaketest.StartMember(t, bin, m, "member A", "127.0.0.2", 64<<20)
	const n, size = 12, 4 << 20 // all 48 MiB on A; B holds 32 MiB
	keys := mooncaketest.Keys("k", n)
	client := mooncaketest.StartClient(t, bin, m, "team-a")
	client.Put(t, keys, size)
	mooncaketest.StartMember(t, bin, m, "member B", "127.0.0.3", 32<<20)

	logFile := filepath.Join(t.TempDir(), "member.log")
	require.NoError(t, os.WriteFile(logFile, nil, 0o644))
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run([]string{"drain-member",
		"--master-admin=" + strings.TrimPrefix(m.Admin, "http://"), // host:port, as the template writes it
		"--pod-ip=127.0.0.2", "--member-pid=" + strconv.Itoa(a.Pid()), "--deadline=6s", "--log-file=" + logFile,
	}, nil, &stdout, &stderr)
	took := time.Since(start)
	t.Logf("drain-member exited %d after %s:\n%s", code, took.Round(time.Millisecond), stdout.String())
	assert.Equal(t, 0, code, stderr.String())
	assert.Less(t, took, 7*time.Second, "exits at its deadline")
	e := finalLine(t, stdout.String())
	assert.Equal(t, "deadline", e["result"])
	assert.EqualValues(t, n*size, e["bytes_at_start"])
	assert.Positive(t, e["bytes_not_moved"], "some bytes could not move")
	assert.EqualValues(t, n*size-e["migrated_bytes"].(float64), e["bytes_not_moved"])
	assert.Contains(t, stdout.String(), `"msg":"drain-lacks-room"`)
	copied, err := os.ReadFile(logFile)
	require.NoError(t, err)
	assert.Equal(t, stdout.String(), string(copied), "--log-file gets the same lines")
	r := client.Get(t, keys, size)
	assert.Len(t, r.OK, n, "nothing lost while A runs; missing %v, wrong %v", r.Missing, r.Wrong)
}
