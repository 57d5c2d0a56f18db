package leader

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kvcache-operator/kvcache/vocab"
)

// The peer protocol: what a backend's launchers tell each other over the Pod network, so that
// an API server outage does not stop a master that still serves its members and clients.
//
// A Lease alone cannot tell a leader whose renewals fail whether a standby can take over: the
// API server may be down for everyone (a control-plane restart: nobody can take over) or away
// only from this leader (a standby will take over at the lease's end, so the master must be
// dead by then). The launchers settle it between themselves:
//
//   - hello: a standby introduces itself to the holder of the term it read; the holder checks
//     the caller is a Pod of the same backend at the address it called from, adds it to its peer
//     set and acknowledges it. From then on the holder keeps its master past its renewals only
//     with that standby's word (below), and the standby may take over as client-go would.
//   - hold: a holder whose renewals have failed for holdAskAfter asks every peer. One that
//     reaches the API server renews the Lease on the holder's behalf ("renewed": the Lease itself
//     then fences everyone), or says the Lease names another ("lost": the holder kills its master
//     at once). One that does not reach it promises to take no Lease over from that term for a
//     lease duration ("promised"). With every peer's promise the holder counts the round as a
//     renewal known to every launcher that could take over, for at most MaxHold.
//   - A launcher the holder's term never acknowledged does not know whether the holder is
//     holding: it takes over only once the record stood unchanged for MaxHold more than the
//     lease duration (takeoverGate).
//
// Requests are authenticated by their source address: a hold only from the holder's Pod IP, a
// hello only from the Pod it names. A tenant that reaches the port can do neither.
const (
	pathHello   = "/v1/hello"
	pathGoodbye = "/v1/goodbye"
	pathHold    = "/v1/hold"

	maxPeerBody = 4 << 10
	// podLookupTimeout bounds a Pod read made while answering a peer.
	podLookupTimeout = 2 * time.Second
)

// term names one leadership: who holds the Lease, since when, after how many transitions. A
// launcher restarted in the same Pod leads a new term (lock.go marks it).
type term struct {
	Holder string `json:"holder"`
	// Acquired is the Lease's acquireTime in Unix microseconds, the precision the Lease keeps.
	Acquired    int64 `json:"acquired"`
	Transitions int   `json:"transitions"`
}

func termOf(r resourcelock.LeaderElectionRecord) term {
	if r.HolderIdentity == "" {
		return term{}
	}
	return term{Holder: r.HolderIdentity, Acquired: r.AcquireTime.UnixMicro(), Transitions: r.LeaderTransitions}
}

func (t term) String() string {
	return fmt.Sprintf("%s (acquired %s, transition %d)", t.Holder, time.UnixMicro(t.Acquired).UTC().Format(time.RFC3339Nano), t.Transitions)
}

type helloRequest struct {
	Identity string `json:"identity"`
	Term     term   `json:"term"`
}

type helloAnswer struct {
	Acked  bool   `json:"acked"`
	Reason string `json:"reason,omitempty"`
}

type goodbyeRequest struct {
	Identity string `json:"identity"`
}

type holdRequest struct {
	Term term `json:"term"`
	// Sent is when the holder sent the request (Unix nanoseconds, its clock) and Wait how long
	// it waits for the answer: a standby that reads it later (it was stopped, or starved) does
	// not act on it, since the holder may be gone by then. Clocks that disagree by more than
	// maxPeerClockSkew make requests look stale and refused, which only ends holds early.
	Sent int64         `json:"sent"`
	Wait time.Duration `json:"wait"`
}

// maxPeerClockSkew is how far apart two nodes' clocks may be before hold requests look stale.
const maxPeerClockSkew = 500 * time.Millisecond

type holdVerdict string

const (
	verdictRenewed  holdVerdict = "renewed"
	verdictPromised holdVerdict = "promised"
	verdictLost     holdVerdict = "lost"
	verdictRefused  holdVerdict = "refused"
)

type holdAnswer struct {
	Verdict holdVerdict `json:"verdict"`
	// Holder is who the Lease names, with "lost".
	Holder string `json:"holder,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// peerNet is one launcher's end of the protocol: its server, its client, the holder's peer
// set and the standby's view of the holder.
type peerNet struct {
	c      Config
	lock   *fencedLock
	log    logr.Logger
	client *http.Client
	srv    *http.Server
	served chan struct{}

	mu      sync.Mutex
	peers   map[string]string // while leading: identity -> Pod IP of every acknowledged peer
	version int               // counts additions to peers
	holders map[string]string // while standby: holder identity -> Pod IP, as the API server said
	labels  map[string]string // this launcher's own Pod's labels

	answers changeLog // the hold answers given
}

// changeLog logs a message only when it is not the one it logged last, so a state that holds
// for every retry is told once.
type changeLog struct {
	mu   sync.Mutex
	last string
}

func (c *changeLog) info(log logr.Logger, msg string, kv ...any) {
	c.mu.Lock()
	same := msg == c.last
	c.last = msg
	c.mu.Unlock()
	if !same {
		log.Info(msg, kv...)
	}
}

// reset makes the next message be logged whatever it is, and says whether one was logged since.
func (c *changeLog) reset() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	had := c.last != ""
	c.last = ""
	return had
}

// startPeers listens on the peer address and serves the protocol until stop.
func (c Config) startPeers(ctx context.Context, lock *fencedLock, log logr.Logger) (*peerNet, error) {
	addr := c.PeerAddress
	if addr == "" {
		addr = ":" + strconv.Itoa(c.PeerPort)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for peers on %s: %w", addr, err)
	}
	dialer := &net.Dialer{Timeout: c.RetryPeriod}
	// Dial from the address listened on when it is a specific one: the peers check the
	// source address against this Pod's IP.
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			dialer.LocalAddr = &net.TCPAddr{IP: ip}
		}
	}
	p := &peerNet{
		c: c, lock: lock, log: log.WithName("peers"),
		client: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}},
		served: make(chan struct{}),
		peers:  map[string]string{}, holders: map[string]string{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathHello, serveJSON(func(ctx context.Context, ip string, req helloRequest) helloAnswer { return p.hello(ctx, req, ip) }))
	mux.HandleFunc("POST "+pathGoodbye, serveJSON(func(_ context.Context, ip string, req goodbyeRequest) struct{} { p.goodbye(req, ip); return struct{}{} }))
	mux.HandleFunc("POST "+pathHold, serveJSON(func(ctx context.Context, ip string, req holdRequest) holdAnswer { return p.hold(ctx, req, ip) }))
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: podLookupTimeout}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	p.log.Info("serving peers", "address", ln.Addr().String())
	return p, nil
}

func (p *peerNet) stop() {
	_ = p.srv.Close()
	<-p.served
}

// serveJSON decodes a bounded JSON request, calls f with the caller's IP and writes its answer.
func serveJSON[Req, Ans any](f func(context.Context, string, Req) Ans) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The whole body is read: only then does the server watch the connection, and end the
		// request's context when the caller hangs up.
		var req Req
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPeerBody))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, "malformed request: "+err.Error(), http.StatusBadRequest)
			return
		}
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, "no caller address", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f(r.Context(), ip, req))
	}
}

// call posts req to the launcher at ip and decodes its answer.
func (p *peerNet) call(ctx context.Context, ip, path string, req, ans any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(p.c.PeerPort)) + path
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(r)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, raw)
	}
	return json.Unmarshal(raw, ans)
}

// getPod reads a Pod of this launcher's namespace.
func (p *peerNet) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, podLookupTimeout)
	defer cancel()
	return p.c.Client.CoreV1().Pods(p.c.PodNamespace).Get(ctx, name, metav1.GetOptions{})
}

// podIP reads a Pod of this launcher's namespace: its IP and labels.
func (p *peerNet) podIP(ctx context.Context, name string) (string, map[string]string, error) {
	pod, err := p.getPod(ctx, name)
	if err != nil {
		return "", nil, err
	}
	if pod.Status.PodIP == "" {
		return "", nil, fmt.Errorf("the Pod %s/%s has no IP yet", p.c.PodNamespace, name)
	}
	return pod.Status.PodIP, pod.Labels, nil
}

// sameBackend: the labels every leader Pod of one backend shares.
var sameBackend = []string{vocab.LabelName, vocab.LabelInstance, vocab.LabelComponent}

// hello answers a standby introducing itself to the term this launcher leads.
func (p *peerNet) hello(ctx context.Context, req helloRequest, ip string) helloAnswer {
	if !p.lock.isLeading() {
		return helloAnswer{Reason: "this launcher does not lead"}
	}
	if t := p.lock.leadTerm(); t != req.Term {
		return helloAnswer{Reason: fmt.Sprintf("this launcher leads term %s, not %s", t, req.Term)}
	}
	if req.Identity == "" || req.Identity == p.c.Identity {
		return helloAnswer{Reason: fmt.Sprintf("identity %q is not a peer", req.Identity)}
	}
	podIP, labels, err := p.podIP(ctx, req.Identity)
	if err != nil {
		return helloAnswer{Reason: "reading the caller's Pod: " + err.Error()}
	}
	if podIP != ip {
		return helloAnswer{Reason: fmt.Sprintf("Pod %s has IP %s; the call came from %s", req.Identity, podIP, ip)}
	}
	own, err := p.ownLabels(ctx)
	if err != nil {
		return helloAnswer{Reason: "reading this launcher's own Pod: " + err.Error()}
	}
	for _, k := range sameBackend {
		if own[k] == "" || labels[k] != own[k] {
			return helloAnswer{Reason: fmt.Sprintf("Pod %s is not a leader Pod of this backend (label %s=%q, this Pod's %q)", req.Identity, k, labels[k], own[k])}
		}
	}
	p.mu.Lock()
	added := p.peers[req.Identity] != ip
	if added {
		p.peers[req.Identity] = ip
		p.version++
	}
	n := len(p.peers)
	p.mu.Unlock()
	if added {
		p.log.Info("acknowledged a peer: the master is held past failing renewals only with its promise", "peer", req.Identity, "ip", ip, "peers", n)
	}
	return helloAnswer{Acked: true}
}

func (p *peerNet) ownLabels(ctx context.Context) (map[string]string, error) {
	p.mu.Lock()
	l := p.labels
	p.mu.Unlock()
	if l != nil {
		return l, nil
	}
	pod, err := p.getPod(ctx, p.c.PodName)
	if err != nil {
		return nil, err
	}
	l = pod.Labels
	p.mu.Lock()
	p.labels = l
	p.mu.Unlock()
	return l, nil
}

// goodbye forgets a peer that stopped campaigning (it exits gracefully).
func (p *peerNet) goodbye(req goodbyeRequest, ip string) {
	p.mu.Lock()
	gone := p.peers[req.Identity] == ip
	if gone {
		delete(p.peers, req.Identity)
	}
	p.mu.Unlock()
	if gone {
		p.log.Info("a peer left", "peer", req.Identity)
	}
}

// peerSnapshot is the peer set to ask in one hold round, and its version.
func (p *peerNet) peerSnapshot() (map[string]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := make(map[string]string, len(p.peers))
	for k, v := range p.peers {
		s[k] = v
	}
	return s, p.version
}

func (p *peerNet) peerVersion() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// prune drops the peers whose Pods are gone (a Pod deleted while its node was down never said
// goodbye). Only a definite NotFound counts.
func (p *peerNet) prune(ctx context.Context) {
	peers, _ := p.peerSnapshot()
	for name := range peers {
		if _, err := p.getPod(ctx, name); apierrors.IsNotFound(err) {
			p.mu.Lock()
			delete(p.peers, name)
			p.mu.Unlock()
			p.log.Info("forgot a peer whose Pod is gone", "peer", name)
		}
	}
}

// hold answers the holder's request to keep its master through failing renewals.
func (p *peerNet) hold(ctx context.Context, req holdRequest, ip string) holdAnswer {
	if p.lock.isLeading() {
		return holdAnswer{Verdict: verdictLost, Holder: p.c.Identity, Reason: "this launcher leads"}
	}
	p.mu.Lock()
	known := p.holders[req.Term.Holder]
	p.mu.Unlock()
	if known == "" || known != ip {
		return holdAnswer{Verdict: verdictRefused, Reason: fmt.Sprintf("the call came from %s, not from the Pod of %s this launcher greeted (%q)", ip, req.Term.Holder, known)}
	}
	// A request the holder stopped waiting for (it sat in a queue while this launcher was
	// stopped, or the holder's call timed out) is not answered: a late renewal or promise would
	// only hold up the takeover after a holder that may be gone.
	if age := time.Since(time.Unix(0, req.Sent)); age > req.Wait+maxPeerClockSkew {
		return holdAnswer{Verdict: verdictRefused, Reason: fmt.Sprintf("the request is %s old by this launcher's clock", age.Round(time.Millisecond))}
	}
	if ctx.Err() != nil {
		return holdAnswer{Verdict: verdictRefused, Reason: "the holder stopped waiting"}
	}
	verdict, holder, err := p.renewFor(ctx, req.Term)
	if err == nil {
		p.answered(verdict, "the holder asked to hold: renewed the Lease on its behalf", req.Term, holder)
		return holdAnswer{Verdict: verdict, Holder: holder}
	}
	if ctx.Err() != nil {
		return holdAnswer{Verdict: verdictRefused, Reason: "the holder stopped waiting"}
	}
	if !p.lock.promise(req.Term, p.c.LeaseDuration) {
		return holdAnswer{Verdict: verdictRefused, Reason: "this launcher has written or is writing the Lease as its own"}
	}
	p.answered(verdictPromised, "the holder asked to hold and the API server does not answer here: promised to stay standby", req.Term, "")
	return holdAnswer{Verdict: verdictPromised, Reason: "the API server did not answer: " + err.Error()}
}

// answered logs a hold answer when it differs from the last one given.
func (p *peerNet) answered(v holdVerdict, msg string, t term, holder string) {
	if v == verdictLost {
		p.answers.info(p.log, "the holder asked to hold, but the Lease names another", "term", t.String(), "holder", holder)
		return
	}
	p.answers.info(p.log, msg, "term", t.String(), "for", p.c.LeaseDuration)
}

// renewFor renews the Lease on the holder's behalf when it still names term t: only the
// renewTime changes, conditional on the version read. An error means the API server could not
// be used, and nothing was learnt.
func (p *peerNet) renewFor(ctx context.Context, t term) (holdVerdict, string, error) {
	// Half the holder's wait for the answer: a promise must still reach it in time.
	ctx, cancel := context.WithTimeout(ctx, p.c.RetryPeriod/2)
	defer cancel()
	leases := p.c.Client.CoordinationV1().Leases(p.c.LeaseNamespace)
	l, err := leases.Get(ctx, p.c.LeaseName, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	rec := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	if got := termOf(*rec); got != t {
		return verdictLost, rec.HolderIdentity, nil
	}
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	now := metav1.NowMicro()
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// Written since the read, after the holder asked: by the holder, another peer or a new
		// holder. The Lease says which.
		if l, err = leases.Get(ctx, p.c.LeaseName, metav1.GetOptions{}); err != nil {
			return "", "", err
		}
		if rec := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec); termOf(*rec) != t {
			return verdictLost, rec.HolderIdentity, nil
		}
	} else if err != nil {
		return "", "", err
	}
	return verdictRenewed, t.Holder, nil
}

// greet introduces this standby to the holder of every term it reads until that term
// acknowledges it, and resolves the holder's Pod IP (hold requests must come from there).
func (p *peerNet) greet(ctx context.Context) {
	var said changeLog
	report := func(msg string, kv ...any) { said.info(p.log, msg, kv...) }
	// A holder that does not answer (an older launcher without the protocol, a Pod not yet
	// addressed) is asked less and less often, down to maxGreetWait: each try reads its Pod.
	wait := p.c.RetryPeriod
	var tried term
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		t, ok := p.lock.readTerm()
		if !ok || t.Holder == "" || t.Holder == p.c.Identity || p.lock.isLeading() || p.lock.isAcked(t) {
			timer.Reset(p.c.RetryPeriod)
			continue
		}
		if t != tried {
			tried, wait = t, p.c.RetryPeriod
		}
		if p.greetOnce(ctx, t, report) {
			wait = p.c.RetryPeriod
		} else {
			wait = min(2*wait, maxGreetWait)
		}
		timer.Reset(wait)
	}
}

// maxGreetWait caps the wait between greetings of a holder that does not acknowledge.
const maxGreetWait = 30 * time.Second

// greetOnce greets the holder of term t once and reports whether it acknowledged this launcher.
func (p *peerNet) greetOnce(ctx context.Context, t term, report func(string, ...any)) bool {
	ip, _, err := p.podIP(ctx, t.Holder)
	if err != nil {
		report("cannot greet the holder: its Pod's address is unknown", "holder", t.Holder, "error", err.Error())
		return false
	}
	p.mu.Lock()
	p.holders[t.Holder] = ip
	p.mu.Unlock()
	var ans helloAnswer
	cctx, cancel := context.WithTimeout(ctx, podLookupTimeout+p.c.RetryPeriod)
	err = p.call(cctx, ip, pathHello, helloRequest{Identity: p.c.Identity, Term: t}, &ans)
	cancel()
	switch {
	case err != nil:
		report("cannot greet the holder", "holder", t.Holder, "ip", ip, "error", err.Error())
	case !ans.Acked:
		report("the holder did not acknowledge this launcher", "holder", t.Holder, "reason", ans.Reason)
	default:
		p.lock.setAcked(t)
		report("acknowledged by the holder as its peer", "term", t.String())
		return true
	}
	return false
}

// sayGoodbye tells the holder that acknowledged this standby that it no longer campaigns.
func (p *peerNet) sayGoodbye() {
	t, ok := p.lock.readTerm()
	if !ok || !p.lock.isAcked(t) {
		return
	}
	p.mu.Lock()
	ip := p.holders[t.Holder]
	p.mu.Unlock()
	if ip == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.RetryPeriod)
	defer cancel()
	var none struct{}
	if err := p.call(ctx, ip, pathGoodbye, goodbyeRequest{Identity: p.c.Identity}, &none); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		p.log.Info("could not say goodbye to the holder", "holder", t.Holder, "error", err.Error())
	}
}
