//go:build linux

package ha_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvcache-operator/kvcache/internal/mooncaketest"
	"github.com/kvcache-operator/kvcache/member"
	"github.com/kvcache-operator/kvcache/store"
	"github.com/kvcache-operator/kvcache/vocab"
)

// Sizes of one trial: freshKeys objects of freshSize bytes, spread over the members' segments.
const (
	freshKeys    = 200
	freshSize    = 64 << 10
	freshSegment = 64 << 20
)

// TestFreshMemberNames measures what `kvcache member-run` closes in warm failover: a member
// that restarts around a failover, under the segment name it had, has the objects the restored
// index still lists for that name read back from its new memory, with a success code. The
// masters replay the operation log through etcd; members and the client reach whichever serves
// at one RPC address, and member-run the admin API at one address, as they do the leader
// Service.
//
// The first case kills two members with the leader and restarts them side by side under the
// same conditions: B (the control) told its old name, C through member-run. Both run with
// address randomization off and one malloc arena, so their memory lands where it was, and with
// their transfer engines pinned to two ports (MC_MIN_RPC_PORT/MC_MAX_RPC_PORT), which the
// engine takes in random order: half the restarts take them the other way round and are not
// comparable. B must read back wrong bytes in at least one comparable restart, or the hazard no
// longer reproduces; C must read nothing wrong, ever: its objects miss and the third member's,
// A's, read back. Two more orders, through member-run: a restart with no failover, then a
// failover; and a restart while no master serves (member-run waits for one).
func TestFreshMemberNames(t *testing.T) {
	t.Parallel() // its stores are its own
	e := freshPrerequisites(t)

	t.Run("restarted across a failover: under the old name (control) and through member-run", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var all []freshHazard
		enough := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(all, func(r freshHazard) bool { return r.control.wrong > 0 }) &&
				slices.ContainsFunc(all, func(r freshHazard) bool { return r.fresh.comparable() })
		}
		for batch := 0; batch < 2 && !enough(); batch++ {
			t.Run(fmt.Sprintf("batch %d", batch+1), func(t *testing.T) {
				for i := 0; i < 2; i++ {
					t.Run(fmt.Sprintf("trial %d", batch*2+i+1), func(t *testing.T) {
						t.Parallel()
						r := freshHazardTrial(t, e)
						t.Log(r)
						mu.Lock()
						all = append(all, r)
						mu.Unlock()
						f := r.fresh
						assert.Zero(t, f.wrong, "member-run's member: no read returns wrong bytes")
						assert.Equal(t, f.held, f.missing, "member-run's member: its objects miss")
						assert.Equal(t, r.a.held, r.a.ok, "the member that stayed: its objects all read back")
						assert.Zero(t, r.a.wrong)
						assert.NotEqual(t, f.oldName, f.newName)
						assert.Contains(t, f.avoided, f.oldName, "member-run avoided the name only the restored index knows")
					})
				}
			})
		}
		freshHazardSummary(t, all)
		if !slices.ContainsFunc(all, func(r freshHazard) bool { return r.control.wrong > 0 }) {
			t.Errorf("in %d trials no read returned wrong bytes under the old name: the hazard no longer reproduces on this store release (or no restart was comparable: see each trial); member-run's case rests on it", len(all))
		}
		if !slices.ContainsFunc(all, func(r freshHazard) bool { return r.fresh.comparable() }) {
			t.Errorf("in %d trials member-run's member never restarted on its old transfer-engine port and memory: its zero wrong reads prove nothing; run again", len(all))
		}
	})

	t.Run("member-run: a restart without a failover, then a failover", func(t *testing.T) {
		t.Parallel()
		var waits []time.Duration
		for i := 0; i < 2; i++ {
			t.Run(fmt.Sprintf("trial %d", i+1), func(t *testing.T) {
				r := freshRestartThenFailover(t, e)
				t.Log(r)
				waits = append(waits, r.waited)
				assert.Zero(t, r.wrong, "no read returns wrong bytes")
				assert.Equal(t, freshKeys-r.onB, r.kept, "the other member's objects all read back")
				assert.Equal(t, r.onB, r.missing, "the restarted member's objects miss (the master removed them with its segment)")
				assert.Contains(t, r.avoided, r.oldName, "member-run avoided the old name, still mounted")
			})
		}
		t.Logf("member-run's choice took (median) %s", freshMedian(waits))
	})

	t.Run("member-run: a restart while no master serves waits for one", func(t *testing.T) {
		t.Parallel()
		var waits []time.Duration
		for i := 0; i < 2; i++ {
			t.Run(fmt.Sprintf("trial %d", i+1), func(t *testing.T) {
				r := freshRestartDuringFailover(t, e)
				t.Log(r)
				waits = append(waits, r.waited)
				assert.Zero(t, r.wrong, "no read returns wrong bytes")
				assert.Equal(t, freshKeys-r.onB, r.kept, "the other member's objects all read back")
				assert.Equal(t, r.onB, r.missing, "the restarted member's objects miss")
				assert.Contains(t, r.avoided, r.oldName, "member-run avoided the name only the restored index knows")
				assert.Greater(t, r.waited, time.Second, "member-run waited for a master")
			})
		}
		t.Logf("member-run waited (median) %s for a master that serves", freshMedian(waits))
	})
}

// freshEnv is what every trial needs: the store's programs, etcd, setarch and kvcache.
type freshEnv struct {
	bin, etcd, kvcache, setarch, arch string
}

func freshPrerequisites(t *testing.T) freshEnv {
	t.Helper()
	e := freshEnv{bin: mooncaketest.Bin(t, "python"), etcd: filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "etcd")}
	if _, err := os.Stat(e.etcd); err != nil {
		t.Fatalf("no etcd at %s (KUBEBUILDER_ASSETS=%q): run `make tools` and `export KUBEBUILDER_ASSETS=$(hack/tools.sh assets)` (or use `make test`)", e.etcd, os.Getenv("KUBEBUILDER_ASSETS"))
	}
	var err error
	if e.setarch, err = exec.LookPath("setarch"); err != nil {
		t.Fatalf("no setarch (%v): it turns address randomization off for the control's members; install util-linux (`apt-get install util-linux`)", err)
	}
	var u syscall.Utsname
	require.NoError(t, syscall.Uname(&u))
	for _, c := range u.Machine {
		if c == 0 {
			break
		}
		e.arch += string(rune(c))
	}
	e.kvcache = buildKvcache(t)
	return e
}

// freshCluster is one etcd, two masters in the store's etcd HA mode with the operation log,
// sharing an RPC port only the serving one binds, and an admin address that reaches whichever
// serves (the leader Service), with members on loopback addresses of their own.
type freshCluster struct {
	t     *testing.T
	e     freshEnv
	rpc   string // the leader Service's RPC address
	admin string // the leader Service's admin address (URL)
	// mu guards masters: the admin proxy reads them while the test kills one.
	mu      sync.Mutex
	masters []*mooncaketest.Master
	client  *mooncaketest.Client
	ips     [3]string
}

// freshSeq numbers trials: each takes its own loopback addresses and transfer-engine ports.
var freshSeq atomic.Int32

func startFreshCluster(t *testing.T, e freshEnv) *freshCluster {
	t.Helper()
	n := int(freshSeq.Add(1))
	c := &freshCluster{t: t, e: e, ips: [3]string{fmt.Sprintf("127.0.%d.2", 20+n), fmt.Sprintf("127.0.%d.3", 20+n), fmt.Sprintf("127.0.%d.4", 20+n)}}
	ports := mooncaketest.FreePorts(t, 3)
	dir := t.TempDir()
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	mooncaketest.Start(t, "etcd", 5*time.Second, nil, e.etcd,
		"--data-dir", filepath.Join(dir, "etcd"), "--name", "fresh",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-cluster", "fresh=http://127.0.0.1:"+strconv.Itoa(ports[1]))
	_, err := poll(15*time.Second, func() error {
		_, err := mooncaketest.GetURL(t.Context(), etcdURL+"/health")
		return err
	})
	require.NoError(t, err, "etcd answers")
	c.rpc = "127.0.0.1:" + strconv.Itoa(ports[2])
	args := []string{"-enable_ha=true", "-ha_backend_type=etcd", "-ha_backend_connstring=" + etcdURL,
		"-enable_oplog=true", "-cluster_id=fresh", "-rpc_address=127.0.0.1",
		"-rpc_port=" + strconv.Itoa(ports[2])} // after StartMaster's own: the last value wins
	for i := range 2 {
		m := mooncaketest.StartMaster(t, e.bin, mooncaketest.MasterOptions{Standby: true, Args: args})
		c.mu.Lock()
		c.masters = append(c.masters, m)
		c.mu.Unlock()
		if i == 0 {
			c.awaitServing(nil, 30*time.Second) // the first leads
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(c.proxyAdmin))
	t.Cleanup(srv.Close)
	c.admin = srv.URL
	return c
}

// serving is the master whose readiness route answers (the leader Service's endpoint), or nil.
func (c *freshCluster) serving() *mooncaketest.Master {
	c.mu.Lock()
	ms := slices.Clone(c.masters)
	c.mu.Unlock()
	for _, m := range ms {
		if m.Exited() {
			continue
		}
		if _, err := mooncaketest.GetURL(c.t.Context(), m.Admin+"/get_all_segments"); err == nil {
			return m
		}
	}
	return nil
}

// proxyAdmin forwards a request to the serving master, as the leader Service routes to the
// Ready one; 503 while none serves.
func (c *freshCluster) proxyAdmin(w http.ResponseWriter, r *http.Request) {
	m := c.serving()
	if m == nil {
		http.Error(w, "no master serves", http.StatusServiceUnavailable)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, m.Admin+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// awaitServing waits until a master other than old serves and returns when.
func (c *freshCluster) awaitServing(old *mooncaketest.Master, d time.Duration) time.Time {
	c.t.Helper()
	at, err := poll(d, func() error {
		if m := c.serving(); m == nil || m == old {
			return fmt.Errorf("no new master serves")
		}
		return nil
	})
	require.NoError(c.t, err)
	return at
}

// killLeader SIGKILLs the serving master and returns it once reaped.
func (c *freshCluster) killLeader() *mooncaketest.Master {
	c.t.Helper()
	m := c.serving()
	require.NotNil(c.t, m, "a master serves")
	m.Signal(syscall.SIGKILL)
	m.Wait(c.t, 5*time.Second)
	return m
}

// freshSegmentDetail is one entry of /get_segments_detail.
type freshSegmentDetail struct {
	Name string `json:"segment_name"`
	TE   string `json:"te_endpoint"`
	Base string `json:"base_address"`
}

func (c *freshCluster) segments() ([]freshSegmentDetail, error) {
	body, err := mooncaketest.GetURL(c.t.Context(), c.admin+"/get_segments_detail")
	if err != nil {
		return nil, err
	}
	var d struct {
		Segments []freshSegmentDetail `json:"segments"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, err
	}
	return d.Segments, nil
}

// awaitSegment waits for a mounted segment of host ip whose name is not in not (and, when
// name is set, is name) and returns it.
func (c *freshCluster) awaitSegment(ip, name string, d time.Duration, not ...string) (freshSegmentDetail, error) {
	var found freshSegmentDetail
	_, err := poll(d, func() error {
		segs, err := c.segments()
		if err != nil {
			return err
		}
		for _, s := range segs {
			if strings.HasPrefix(s.Name, ip+":") && !slices.Contains(not, s.Name) && (name == "" || s.Name == name) {
				found = s
				return nil
			}
		}
		return fmt.Errorf("no new segment of %s among %v", ip, segs)
	})
	return found, err
}

// gone waits until no mounted segment is named name.
func (c *freshCluster) gone(name string, d time.Duration) error {
	_, err := poll(d, func() error {
		segs, err := c.segments()
		if err != nil {
			return err
		}
		for _, s := range segs {
			if s.Name == name {
				return fmt.Errorf("%s is still mounted", name)
			}
		}
		return nil
	})
	return err
}

// objectsOn is how many objects the serving master's /metrics counts on segment name.
func (c *freshCluster) objectsOn(name string) int {
	c.t.Helper()
	m, err := store.New(c.admin).Metrics(c.t.Context())
	require.NoError(c.t, err)
	return int(m.Segments[name].AllocatedBytes / freshSize)
}

// freshMemberOpts: how a member process starts.
type freshMemberOpts struct {
	ip string
	// hostname, when set, is the member's own MOONCAKE_LOCAL_HOSTNAME and it starts without
	// member-run; otherwise through member-run.
	hostname string
	// te, when not 0, pins the transfer engine to ports te and te+1.
	te int
	// noASLR runs it with address randomization off and one malloc arena, so that its segment
	// lands at the same address each time.
	noASLR bool
}

func (c *freshCluster) startMember(label string, o freshMemberOpts) *mooncaketest.Proc {
	c.t.Helper()
	env := []string{
		"MOONCAKE_MASTER=" + c.rpc, "MOONCAKE_TE_META_DATA_SERVER=P2PHANDSHAKE", "MOONCAKE_PROTOCOL=tcp",
		vocab.LocalHostnameEnv + "=" + o.ip, // as the template sets it, from status.podIP
		"MOONCAKE_GLOBAL_SEGMENT_SIZE=" + strconv.Itoa(freshSegment), "MOONCAKE_LOCAL_BUFFER_SIZE=16777216",
		vocab.DrainAdminEnv + "=" + strings.TrimPrefix(c.admin, "http://"), vocab.DrainPodIPEnv + "=" + o.ip,
	}
	if o.te != 0 {
		env = append(env, "MC_MIN_RPC_PORT="+strconv.Itoa(o.te), "MC_MAX_RPC_PORT="+strconv.Itoa(o.te+1))
	}
	if o.noASLR {
		// One malloc arena: how many threads made their own before the segment was mapped
		// moves it by 16 or 64 MiB from one start to the next (measured); with one it lands
		// at the same address every time.
		env = append(env, "MALLOC_ARENA_MAX=1")
	}
	argv := []string{filepath.Join(c.e.bin, vocab.MemberCommand), "--port=" + strconv.Itoa(mooncaketest.FreePorts(c.t, 1)[0])}
	if o.hostname != "" {
		env = append(env, vocab.LocalHostnameEnv+"="+o.hostname) // the later setting wins
	} else {
		argv = append([]string{c.e.kvcache, vocab.MemberRunCommand, "--wait=3m", "--"}, argv...)
	}
	if o.noASLR {
		argv = append([]string{c.e.setarch, c.e.arch, "-R"}, argv...)
	}
	return mooncaketest.Start(c.t, label, 5*time.Second, env, argv[0], argv[1:]...)
}

// freshTEFree waits until a new transfer engine can bind ports te and te+1 as it does (without
// SO_REUSEADDR): the killed member's handshake connections hold them in TIME_WAIT for a minute.
func freshTEFree(te int, d time.Duration) error {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 0) })
		if err != nil {
			return err
		}
		return serr
	}}
	_, err := poll(d, func() error {
		for _, p := range []int{te, te + 1} {
			ln, err := lc.Listen(context.Background(), "tcp4", "0.0.0.0:"+strconv.Itoa(p))
			if err != nil {
				return err
			}
			_ = ln.Close()
		}
		return nil
	})
	return err
}

// freshTE hands each trial two transfer-engine ports of its own, outside the range the other
// members and the client draw theirs from (15000-17000) and outside the ephemeral range, which
// the store refuses for them.
var freshTE atomic.Int32

func freshNextTE(t *testing.T) int {
	for {
		te := 17100 + 2*int(freshTE.Add(1))
		if te+1 >= 32768 {
			t.Fatalf("no transfer-engine ports left below the ephemeral range")
		}
		if freshTEFree(te, 0) == nil {
			return te
		}
	}
}

// freshChoice is member-run's "member-run-chose" line in a member's output.
type freshChoice struct {
	Name     string   `json:"name"`
	Mounted  []string `json:"avoided_mounted"`
	Indexed  []string `json:"avoided_indexed"`
	Waited   string   `json:"waited"`
	Attempts int      `json:"attempts"`
}

func freshChose(t *testing.T, p *mooncaketest.Proc) freshChoice {
	t.Helper()
	for _, l := range strings.Split(p.Output(), "\n") {
		if !strings.Contains(l, `"msg":"member-run-chose"`) {
			continue
		}
		var c freshChoice
		require.NoError(t, json.Unmarshal([]byte(l), &c))
		return c
	}
	t.Fatalf("member-run wrote no member-run-chose line:\n%s", p.Output())
	return freshChoice{}
}

// freshListening is the transfer engine's handshake port as the member logged it ("" when it has
// not said yet).
func freshListening(p *mooncaketest.Proc) string {
	const marker = "Transfer Engine RPC using P2P handshake, listening on "
	out := p.Output()
	i := strings.LastIndex(out, marker)
	if i < 0 {
		return ""
	}
	rest, complete := strings.CutSuffix(out[i+len(marker):], "\n")
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest, complete = rest[:j], true
	}
	if !complete {
		return "" // the line is still being written
	}
	return strings.TrimSpace(rest)
}

// readBack reads every key until at least want read back (the client reconnects to the new
// master first) or 30 s pass.
func (c *freshCluster) readBack(keys []string, want int) mooncaketest.Reads {
	var r mooncaketest.Reads
	_, _ = poll(30*time.Second, func() error {
		r = c.client.Get(c.t, keys, freshSize)
		if len(r.OK)+len(r.Wrong) < want {
			return fmt.Errorf("%d read back", len(r.OK))
		}
		return nil
	})
	return r
}

// freshRestart is what became of one restarted member's objects.
type freshRestart struct {
	held               int // objects on it before the kill
	ok, missing, wrong int
	oldName, newName   string
	oldTE, newTE       string
	oldBase, newBase   string
	avoided            []string // member-run's only
	notMounted         string   // why it never mounted again, if it did not
	mounted            time.Duration
	starts             int // of the restart, until comparable
}

// comparable: the restart listens on the old transfer-engine port with its segment at the old
// address, which is what a read of the old objects needs to reach its memory.
func (r freshRestart) comparable() bool {
	_, oldPort, _ := net.SplitHostPort(r.oldTE)
	_, newPort, _ := net.SplitHostPort(r.newTE)
	return oldPort != "" && oldPort == newPort && r.oldBase != "" && r.oldBase == r.newBase
}

func (r freshRestart) String() string {
	s := fmt.Sprintf("%d held: %d read back, %d missing, %d wrong; name %s -> %s, transfer engine %s -> %s, segment at %s -> %s, mounted %s after the kills (start %d)",
		r.held, r.ok, r.missing, r.wrong, r.oldName, r.newName, r.oldTE, r.newTE, r.oldBase, r.newBase, r.mounted.Round(time.Millisecond), r.starts)
	if r.avoided != nil {
		s += fmt.Sprintf(", member-run avoided %v", r.avoided)
	}
	if r.notMounted != "" {
		s += "; never mounted again: " + r.notMounted
	}
	if !r.comparable() {
		s += " (not comparable: the transfer engine or the memory moved)"
	}
	return s
}

// freshHazard is one trial of two members restarted across a failover.
type freshHazard struct {
	a              struct{ held, ok, wrong int }
	control, fresh freshRestart
	served, freed  time.Duration // after the kills
}

func (r freshHazard) String() string {
	return fmt.Sprintf("a master served %s after the kills, the pinned ports were free after %s; A (stayed): %d held, %d read back, %d wrong; B (control, old name): %s; C (member-run): %s",
		r.served.Round(time.Millisecond), r.freed.Round(time.Millisecond), r.a.held, r.a.ok, r.a.wrong, r.control, r.fresh)
}

// freshHazardTrial: members A (through member-run, as the store runs it), B (told an explicit
// name) and C (through member-run), B and C with address randomization off, one malloc arena
// and their transfer engines pinned; objects on all three; B, C and the serving master killed
// together; B and C restarted the same way once a master serves and their ports are free;
// every object read back and told apart by the member that held it.
func freshHazardTrial(t *testing.T, e freshEnv) freshHazard {
	c := startFreshCluster(t, e)
	ipA, ipB, ipC := c.ips[0], c.ips[1], c.ips[2]
	oB := freshMemberOpts{ip: ipB, hostname: ipB + ":13001", te: freshNextTE(t), noASLR: true}
	oC := freshMemberOpts{ip: ipC, te: freshNextTE(t), noASLR: true}
	c.startMember("member A", freshMemberOpts{ip: ipA})
	b := c.startMember("member B", oB)
	cm := c.startMember("member C", oC)
	var r freshHazard
	segs := map[string]freshSegmentDetail{}
	for _, ip := range []string{ipA, ipB, ipC} {
		s, err := c.awaitSegment(ip, "", 60*time.Second)
		require.NoError(t, err, "the member on %s mounts", ip)
		segs[ip] = s
	}
	c.client = mooncaketest.StartClientAt(t, e.bin, c.rpc, "default", nil)
	keys := mooncaketest.Keys("k", freshKeys)
	c.client.Put(t, keys, freshSize)
	on := c.placement(keys)
	r.a.held = len(on[ipA])
	r.control = freshRestart{held: len(on[ipB]), oldName: segs[ipB].Name, oldTE: segs[ipB].TE, oldBase: segs[ipB].Base}
	r.fresh = freshRestart{held: len(on[ipC]), oldName: segs[ipC].Name, oldTE: segs[ipC].TE, oldBase: segs[ipC].Base}
	require.Positive(t, r.control.held, "member B holds objects")
	require.Positive(t, r.fresh.held, "member C holds objects")
	time.Sleep(time.Second) // the last records reach etcd

	b.Kill()
	cm.Kill()
	t0 := time.Now()
	leader := c.killLeader()
	r.served = c.awaitServing(leader, 60*time.Second).Sub(t0)
	require.NoError(t, freshTEFree(oB.te, 90*time.Second), "member B's transfer-engine ports are free again")
	require.NoError(t, freshTEFree(oC.te, 90*time.Second), "member C's transfer-engine ports are free again")
	r.freed = time.Since(t0)
	c.restartLike(t0, "member B restarted", oB, &r.control, false)
	c2 := c.restartLike(t0, "member C restarted", oC, &r.fresh, true)
	ch := freshChose(t, c2)
	r.fresh.avoided = append(append([]string{}, ch.Mounted...), ch.Indexed...)

	reads := c.readBack(keys, r.a.held)
	tally := func(ip string, ok, missing, wrong *int) {
		for _, k := range on[ip] {
			switch {
			case slices.Contains(reads.OK, k):
				*ok++
			case slices.Contains(reads.Wrong, k):
				*wrong++
			default:
				*missing++
			}
		}
	}
	var aMissing int
	tally(ipA, &r.a.ok, &aMissing, &r.a.wrong)
	tally(ipB, &r.control.ok, &r.control.missing, &r.control.wrong)
	tally(ipC, &r.fresh.ok, &r.fresh.missing, &r.fresh.wrong)
	return r
}

// freshRestarts bounds the starts of one restart.
const freshRestarts = 6

// restartLike starts a killed member again with o until it is comparable: its transfer engine
// takes its two pinned ports in random order, so a start that listens on the other one is
// killed and started again before anything reached it; so is, through member-run (fresh), one
// whose segment moved. The control's restart is kept once its engine listens where it did: it
// remounts the old name at once, and killing it then would unmount that name and its objects.
func (c *freshCluster) restartLike(t0 time.Time, label string, o freshMemberOpts, x *freshRestart, fresh bool) *mooncaketest.Proc {
	t := c.t
	_, wantPort, _ := net.SplitHostPort(x.oldTE)
	name, not := x.oldName, []string(nil) // the control mounts under its old name
	if fresh {
		name, not = "", []string{x.oldName} // member-run under any other
	}
	for start := 1; ; start++ {
		last := start == freshRestarts
		require.NoError(t, freshTEFree(o.te, 90*time.Second), "%s: the transfer-engine ports are free", label)
		p := c.startMember(fmt.Sprintf("%s (start %d)", label, start), o)
		x.starts = start
		var te string
		_, err := poll(30*time.Second, func() error {
			if te = freshListening(p); te == "" {
				return fmt.Errorf("%s has not said where its transfer engine listens", label)
			}
			return nil
		})
		require.NoError(t, err)
		if _, port, _ := net.SplitHostPort(te); port != wantPort && !last {
			p.Kill()
			continue
		}
		seg, err := c.awaitSegment(o.ip, name, 30*time.Second, not...)
		x.mounted = time.Since(t0)
		if err != nil {
			x.notMounted, x.newTE = err.Error(), te
			return p
		}
		x.newName, x.newTE, x.newBase = seg.Name, seg.TE, seg.Base
		if fresh && seg.Base != x.oldBase && !last {
			not = append(not, seg.Name)
			p.Kill()
			continue
		}
		return p
	}
}

// placement is which member holds each key, by the host of its replica's transfer engine, as
// the serving master says.
func (c *freshCluster) placement(keys []string) map[string][]string {
	c.t.Helper()
	body, err := mooncaketest.GetURL(c.t.Context(), c.admin+"/batch_query_keys?keys="+strings.Join(keys, ","))
	require.NoError(c.t, err)
	var d struct {
		Data map[string]struct {
			Values []struct {
				TE string `json:"transport_endpoint_"`
			} `json:"values"`
		} `json:"data"`
	}
	require.NoError(c.t, json.Unmarshal(body, &d), "%s", body)
	on := map[string][]string{}
	for _, k := range keys {
		v := d.Data[k].Values
		require.Len(c.t, v, 1, "one replica of %s", k)
		host, _, err := net.SplitHostPort(v[0].TE)
		require.NoError(c.t, err)
		on[host] = append(on[host], k)
	}
	return on
}

func freshHazardSummary(t *testing.T, all []freshHazard) {
	t.Helper()
	var served, freed []time.Duration
	count := func(f func(freshHazard) bool) int {
		n := 0
		for _, r := range all {
			if f(r) {
				n++
			}
		}
		return n
	}
	for _, r := range all {
		served = append(served, r.served)
		freed = append(freed, r.freed)
	}
	t.Logf("%d trials; a master served after (median) %s, the pinned ports were free after %s", len(all), freshMedian(served), freshMedian(freed))
	t.Logf("  control (old name): %d comparable, %d with wrong reads", count(func(r freshHazard) bool { return r.control.comparable() }), count(func(r freshHazard) bool { return r.control.wrong > 0 }))
	t.Logf("  member-run: %d comparable, %d with wrong reads", count(func(r freshHazard) bool { return r.fresh.comparable() }), count(func(r freshHazard) bool { return r.fresh.wrong > 0 }))
	for i, r := range all {
		t.Logf("  trial %d: %s", i+1, r)
	}
}

// freshOrder is one trial of another order of restart and failover.
type freshOrder struct {
	onB                  int
	kept, missing, wrong int
	oldName, newName     string
	avoided              []string
	waited               time.Duration
	pidIsMember          string
}

func (r freshOrder) String() string {
	return fmt.Sprintf("%d of %d kept, %d missing, %d wrong (the restarted member held %d); name %s -> %s, member-run avoided %v and chose after %s; %s",
		r.kept, freshKeys, r.missing, r.wrong, r.onB, r.oldName, r.newName, r.avoided, r.waited, r.pidIsMember)
}

// startPair starts members A and B through member-run, waits for both segments and puts the
// objects; it returns B, B's segment and how many objects it holds.
func (c *freshCluster) startPair() (*mooncaketest.Proc, freshSegmentDetail, []string, int) {
	t := c.t
	c.startMember("member A", freshMemberOpts{ip: c.ips[0]})
	b := c.startMember("member B", freshMemberOpts{ip: c.ips[1]})
	_, err := c.awaitSegment(c.ips[0], "", 60*time.Second)
	require.NoError(t, err, "member A mounts")
	seg, err := c.awaitSegment(c.ips[1], "", 60*time.Second)
	require.NoError(t, err, "member B mounts")
	c.client = mooncaketest.StartClientAt(t, c.e.bin, c.rpc, "default", nil)
	keys := mooncaketest.Keys("k", freshKeys)
	c.client.Put(t, keys, freshSize)
	onB := c.objectsOn(seg.Name)
	require.Positive(t, onB, "member B holds objects")
	return b, seg, keys, onB
}

// finish fills in what member-run chose, and checks that the member runs as member-run's own
// process (exec), which is what the preStop hook's --member-pid=1 relies on.
func (r *freshOrder) finish(t *testing.T, b2 *mooncaketest.Proc, seg freshSegmentDetail) {
	ch := freshChose(t, b2)
	r.newName, r.avoided = ch.Name, append(append([]string{}, ch.Mounted...), ch.Indexed...)
	w, err := time.ParseDuration(ch.Waited)
	require.NoError(t, err)
	r.waited = w
	assert.Equal(t, ch.Name, seg.Name, "the member mounted under the name member-run chose")
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", b2.Pid()))
	require.NoError(t, err)
	assert.Contains(t, string(cmdline), vocab.MemberCommand, "member-run's process is the member now")
	ports, err := member.ListeningPorts(b2.Pid())
	require.NoError(t, err)
	_, te, _ := net.SplitHostPort(seg.TE)
	p, _ := strconv.Atoi(te)
	assert.True(t, ports[p], "member-run's PID listens on the member's transfer-engine port %d: %v", p, ports)
	r.pidIsMember = fmt.Sprintf("member-run's PID %d is the member (listens on %d)", b2.Pid(), p)
}

// freshRestartThenFailover: B is killed and restarted through member-run at once, with a master
// serving throughout; once B's old segment is gone the serving master is killed.
func freshRestartThenFailover(t *testing.T, e freshEnv) freshOrder {
	c := startFreshCluster(t, e)
	b, old, keys, onB := c.startPair()
	r := freshOrder{onB: onB, oldName: old.Name}
	b.Kill()
	b2 := c.startMember("member B restarted", freshMemberOpts{ip: c.ips[1]})
	seg, err := c.awaitSegment(c.ips[1], "", 60*time.Second, old.Name)
	require.NoError(t, err, "member B mounts again")
	r.finish(t, b2, seg)
	require.NoError(t, c.gone(old.Name, 60*time.Second), "the master unmounts the killed member's segment")
	time.Sleep(time.Second) // the last records reach etcd
	leader := c.killLeader()
	c.awaitServing(leader, 60*time.Second)
	reads := c.readBack(keys, freshKeys-onB)
	r.kept, r.missing, r.wrong = len(reads.OK), len(reads.Missing), len(reads.Wrong)
	return r
}

// freshRestartDuringFailover: B and the serving master are killed together and B restarted
// through member-run at once, while no master serves.
func freshRestartDuringFailover(t *testing.T, e freshEnv) freshOrder {
	c := startFreshCluster(t, e)
	b, old, keys, onB := c.startPair()
	r := freshOrder{onB: onB, oldName: old.Name}
	time.Sleep(time.Second) // the last records reach etcd
	b.Kill()
	leader := c.killLeader()
	b2 := c.startMember("member B restarted", freshMemberOpts{ip: c.ips[1]})
	c.awaitServing(leader, 60*time.Second)
	seg, err := c.awaitSegment(c.ips[1], "", 60*time.Second, old.Name)
	require.NoError(t, err, "member B mounts again")
	r.finish(t, b2, seg)
	assert.Contains(t, b2.Output(), `"msg":"member-run-waiting"`, "member-run said what it waited for")
	reads := c.readBack(keys, freshKeys-onB)
	r.kept, r.missing, r.wrong = len(reads.OK), len(reads.Missing), len(reads.Wrong)
	return r
}

func freshMedian(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond)
}
