package enginestats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kvcache-operator/kvcache/engines"
)

// Defaults of a Scraper.
const (
	// DefaultTimeout bounds one scrape (connect, request, body). An engine busy with a prefill
	// still answers /metrics from its API server process within milliseconds.
	DefaultTimeout = 3 * time.Second
	// DefaultBodyLimit caps one page: vLLM's is about 60 KiB with its histograms.
	DefaultBodyLimit int64 = 2 << 20
)

// Scraper reads engine Pods' /metrics directly from their Pod IP: the path a Prometheus takes,
// so a NetworkPolicy that admits the user's monitoring admits it the same way. It never
// follows a redirect and never reads more than its body limit. The zero value is ready.
type Scraper struct {
	// Transport sends the requests; nil: a dialer with the timeout and no proxy (an engine
	// Pod is reached on the Pod network, never through the manager's HTTP proxy).
	Transport http.RoundTripper
	Timeout   time.Duration
	BodyLimit int64
}

// ErrRedirect is wrapped by the error of a scrape answered with a 3xx.
var ErrRedirect = errors.New("redirect not followed")

// Target is where a Pod's engine publishes its counters: the Pod IP and the port the engine
// container's launch line serves on, or an error that says why it cannot be known.
func Target(p *corev1.Pod, e engines.Engine, container string) (url string, err error) {
	if p.Status.PodIP == "" {
		return "", fmt.Errorf("pod %s/%s has no IP yet", p.Namespace, p.Name)
	}
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		argv := append(append([]string{}, c.Command...), c.Args...)
		port, ok := e.ServingPort(argv)
		if !ok {
			return "", fmt.Errorf("the %s port of container %s of pod %s/%s cannot be read from its launch line (%s takes a number): write it as a number", e.Name, c.Name, p.Namespace, p.Name, e.Serve.PortFlag)
		}
		return "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))) + "/metrics", nil
	}
	return "", fmt.Errorf("pod %s/%s has no container %s", p.Namespace, p.Name, container)
}

// Scrape reads the counters at url.
func (s *Scraper) Scrape(ctx context.Context, e engines.Engine, url string) (Counters, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	limit := s.BodyLimit
	if limit <= 0 {
		limit = DefaultBodyLimit
	}
	rt := s.Transport
	if rt == nil {
		rt = &http.Transport{
			Proxy:             nil,
			DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
			DisableKeepAlives: true,
		}
	}
	hc := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Counters{}, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return Counters{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return Counters{}, fmt.Errorf("GET %s: %s: %w", url, resp.Status, ErrRedirect)
	}
	if resp.StatusCode != http.StatusOK {
		return Counters{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return Counters{}, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(body)) > limit {
		return Counters{}, fmt.Errorf("GET %s: the page is larger than %d bytes", url, limit)
	}
	return Parse(e, bytes.NewReader(body))
}
