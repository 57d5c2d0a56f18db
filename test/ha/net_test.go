//go:build linux

package ha_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// apiProxy stands between one launcher and the API server, so the test can cut that
// launcher off (a network partition) while the others keep their connection. It forwards TCP;
// TLS passes through untouched. Cut, it drops every open connection and then accepts new ones
// without forwarding a byte: requests hang as they would behind a black hole.
type apiProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func startAPIProxy(t *testing.T, target string) *apiProxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &apiProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.setCut(true)
	})
	return p
}

func (p *apiProxy) addr() string { return p.ln.Addr().String() }

func (p *apiProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = struct{}{}
	return !p.cut
}

func (p *apiProxy) forget(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// setCut cuts the launcher off (true) or reconnects it (false). Either way the connections
// open at the time are closed: cutting drops the forwarded ones, reconnecting ends the black
// holes (as an API server coming back resets what clients held), so the launcher's next
// request goes through rather than waiting out its timeout.
func (p *apiProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *apiProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(in)
	}
}

func (p *apiProxy) forward(in net.Conn) {
	defer func() { _ = in.Close() }()
	if !p.track(in) {
		_, _ = io.Copy(io.Discard, in) // the black hole: read, never answer
		p.forget(in)
		return
	}
	defer p.forget(in)
	out, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer func() { _ = out.Close() }()
	if !p.track(out) {
		return
	}
	defer p.forget(out)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// admin reads the serving master's admin port (the address the leader Service stands for).
type admin struct{ base string }

var adminHTTP = &http.Client{Timeout: 2 * time.Second}

func (a admin) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return string(body), nil
}

// capacity is master_total_capacity_bytes from /metrics: the segments mounted on it.
func (a admin) capacity(ctx context.Context) (int64, error) {
	body, err := a.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, "master_total_capacity_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, errors.New("no master_total_capacity_bytes in /metrics")
}
