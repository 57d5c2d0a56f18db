package scale_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// freePort asks the kernel for a port nothing listens on.
func freePort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeSelfSignedCert writes tls.crt and tls.key (a self-signed ECDSA certificate for localhost)
// into dir, for the webhook server of a manager run with --cert-mode=external.
func writeSelfSignedCert(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "kvcache-scale-webhook"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// managerProcess is `kvcache manager` running as a child process.
type managerProcess struct {
	cmd   *exec.Cmd
	log   string
	probe int
	done  chan struct{}
	err   error
}

// startManager runs bin (the kvcache binary) as the manager, with extra flags appended. kubeconfigFlag passes the kubeconfig
// as --kubeconfig (client-go's default client-side limit of 5 QPS / burst 10 per API
// resource applies); otherwise it is handed over in $KUBECONFIG, which the manager then loads
// through controller-runtime's GetConfig (client-side limit off, as in a cluster).
func startManager(bin, dir, kubeconfig string, kubeconfigFlag bool, systemNamespace string, extraEnv, extra []string) (*managerProcess, error) {
	probe, err := freePort()
	if err != nil {
		return nil, err
	}
	webhookPort, err := freePort()
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	if err := writeSelfSignedCert(certDir); err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	args := []string{"manager",
		"--system-namespace=" + systemNamespace,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--cert-mode=external",
		"--cert-dir=" + certDir,
	}
	args = append(args, extra...)
	env := append(os.Environ(), "KUBECONFIG=/nonexistent") // never the developer's cluster
	env = append(env, extraEnv...)
	if kubeconfigFlag {
		args = append(args, "--kubeconfig="+kubeconfig)
	} else {
		env = append(env, "KUBECONFIG="+kubeconfig) // the last value of a duplicate key wins
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	logPath := filepath.Join(dir, "manager.log")
	logs, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		logs.Close()
		return nil, err
	}
	m := &managerProcess{cmd: cmd, log: logPath, probe: probe, done: make(chan struct{})}
	go func() {
		m.err = cmd.Wait()
		logs.Close()
		close(m.done)
	}()
	return m, nil
}

func (m *managerProcess) pid() int { return m.cmd.Process.Pid }

func (m *managerProcess) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// waitReady polls /readyz until the manager answers 200 (its webhook server serves with the
// certificate given to it).
func (m *managerProcess) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", m.probe)
	for time.Now().Before(deadline) {
		if m.exited() {
			return fmt.Errorf("the manager exited: %w\n%s", m.err, m.logTail(3000))
		}
		resp, err := http.Get(url) //nolint:noctx // a readiness poll
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the manager was not ready after %s\n%s", timeout, m.logTail(3000))
}

// stop sends SIGTERM and waits; SIGKILL after 20 s.
func (m *managerProcess) stop() {
	if m.exited() {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(20 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// waitWorkers waits until the manager log says the controllers' workers started, that is
// their caches synced: objects created earlier reach the controllers in the informers' initial
// list, which controller-runtime's priority queue enqueues at low priority.
func (m *managerProcess) waitWorkers(timeout time.Duration, controllers ...string) error {
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(m.log)
		missing := 0
		for _, c := range controllers {
			if !strings.Contains(string(b), `"msg":"Starting workers","controller":"`+c+`"`) {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if m.exited() {
			return fmt.Errorf("the manager exited: %w\n%s", m.err, m.logTail(3000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager log does not show the workers of %v starting after %s", controllers, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *managerProcess) logTail(n int) string {
	b, _ := os.ReadFile(m.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// logErrors counts the manager log's error lines by message (zap JSON) and returns the most
// frequent ones with one example error each.
func logErrors(path string) (int, []string) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	type agg struct {
		n       int
		example string
	}
	byMsg := map[string]*agg{}
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l struct {
			Level      string `json:"level"`
			Msg        string `json:"msg"`
			Error      string `json:"error"`
			Controller string `json:"controller"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Level != "error" {
			continue
		}
		total++
		k := l.Controller + ": " + l.Msg
		if byMsg[k] == nil {
			byMsg[k] = &agg{example: l.Error}
		}
		byMsg[k].n++
	}
	keys := make([]string, 0, len(byMsg))
	for k := range byMsg {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return byMsg[keys[i]].n > byMsg[keys[j]].n })
	var out []string
	for i, k := range keys {
		if i == 5 {
			break
		}
		ex := byMsg[k].example
		if len(ex) > 300 {
			ex = ex[:300] + "..."
		}
		out = append(out, fmt.Sprintf("%dx %s (e.g. %s)", byMsg[k].n, k, ex))
	}
	return total, out
}

// procMem is what /proc/<pid>/status says about a process's memory, in KiB: the resident set
// (VmRSS), its peak (VmHWM), and the resident set split into anonymous memory (the Go heap,
// stacks) and file pages (the binary's mapped text and data).
type procMem struct{ rss, hwm, anon, file int64 }

func (m procMem) rssMiB() float64 { return float64(m.rss) / 1024 }
func (m procMem) hwmMiB() float64 { return float64(m.hwm) / 1024 }

func (m procMem) String() string {
	return fmt.Sprintf("%.1f MiB (anon %.1f + file %.1f)", m.rssMiB(), float64(m.anon)/1024, float64(m.file)/1024)
}

func readMem(pid int) (procMem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMem{}, err
	}
	var m procMem
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			m.rss = n
		case "VmHWM":
			m.hwm = n
		case "RssAnon":
			m.anon = n
		case "RssFile":
			m.file = n
		}
	}
	if m.rss == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// cpuSeconds is the user+system CPU time a process used so far (/proc/<pid>/stat, at the
// usual 100 ticks per second).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name may hold spaces; the fields after it start past the last ')'.
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	// After ')': state is field 3, utime field 14, stime field 15 (1-based, of the whole line).
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}
