package leader

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
)

// Defaults for the election timing, chosen for the two failover budgets:
//   - graceful (the leader is stopped): the Lease is released, and a standby retries every
//     RetryPeriod to RetryPeriod*2.2 (client-go's jitter), so it takes over within ~2.2 s;
//   - crash (the leader Pod dies): a standby takes over once the Lease it last saw is
//     LeaseDuration old, at worst LeaseDuration + 2 retries (~14.4 s), leaving room within
//     20 s for the master to start and members to re-register.
//
// RenewDeadline is how long the leader tolerates failing renewals before it kills its master;
// the 3 s between it and LeaseDuration is the margin that keeps two masters from serving at
// once. A shorter LeaseDuration would make an API server outage of a few seconds stop the
// serving master (and lose its cache); a longer one slows crash failover.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = 1 * time.Second
	// DefaultStopGrace bounds a graceful master stop (it measured 0.3-0.6 s after SIGTERM).
	DefaultStopGrace = 3 * time.Second
	// DefaultMaxHold is how long past its last renewal a leader keeps its master on its
	// standbys' promises alone, while nobody reaches the API server: longer than a restart of
	// the API server (20 s measured, 15 s of it its graceful stop). A standby that the leader's
	// term never acknowledged waits this much longer before it takes over.
	DefaultMaxHold = 60 * time.Second
	// DefaultUnservedGrace is how long the leading launcher's Pod may read Ready=False before it
	// hands over: a serving master is Ready within 2-3 s (probe period 1 s, two failures to
	// drop), so 30 s of not Ready means the leader Service has not routed to this master for
	// that long (its node's kubelet or runtime is gone, or the probe cannot reach it).
	DefaultUnservedGrace = 30 * time.Second
	// DefaultLinger is how long a launcher that handed over gracefully stays up, master stopped,
	// before it exits: see Config.Linger. A new master serves 2.3-3.2 s after the old one's Pod
	// is deleted (measured on the real cluster).
	DefaultLinger = 5 * time.Second
)

// Config is one launcher: which Lease it campaigns for, as whom, and which master it runs.
type Config struct {
	// Client reaches the API server; it needs leases create/get/update in LeaseNamespace and,
	// when PodName is set, pods patch in PodNamespace.
	Client kubernetes.Interface

	LeaseNamespace, LeaseName string
	// Identity is written as the Lease's holderIdentity: the Pod's name, so the holder names
	// the Pod.
	Identity string
	// PodNamespace/PodName is the launcher's own Pod, labelled with vocab.LabelStoreLeader. An empty
	// PodName writes no label (out-of-cluster runs).
	PodNamespace, PodName string

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// StopGrace is how long a graceful stop waits after SIGTERM before it SIGKILLs the master.
	StopGrace time.Duration
	// Linger keeps a launcher that stopped its master and released the Lease on a graceful stop
	// alive that long before it returns. While no standby is ready yet, kube-proxy still sends
	// the leader Service's traffic to the terminating leader Pod; as long as the Pod's network
	// lives, a member's or client's connection there is refused at once and retried, where a
	// Pod that is gone drops it silently and the client waits out its 30 s connect timeout
	// (measured: a put 31.5 s after the handover without it, 2.6-4.0 s with 5 s).
	Linger time.Duration

	// PeerPort is the port every launcher of the backend serves the peer protocol on (peer.go),
	// over which a leader whose renewals fail keeps its master while its standbys renew the
	// Lease for it or promise not to take over. 0: no peer protocol, and a leader whose
	// renewals fail for RenewDeadline kills its master whatever the cause.
	PeerPort int
	// PeerAddress is the address to listen on for peers, and, when it names an IP, to call
	// them from; empty: every interface on PeerPort.
	PeerAddress string
	// MaxHold bounds how long past its last renewal a leader keeps its master on promises.
	MaxHold time.Duration
	// UnservedGrace is how long the leading launcher's Pod may read Ready=False, counted from
	// the term's start or its last Ready, before the launcher hands over (its master stopped
	// gracefully, the Lease released): a master the leader Service does not route to serves
	// nobody, and its Lease keeps the standbys from serving. A Pod being deleted or gone hands
	// over at once (its kubelet may be unable to stop it). 0: never; needs PodName.
	UnservedGrace time.Duration

	// Command is the master's argv; it inherits this process's environment.
	Command []string
	// Stdout and Stderr receive the master's output (nil: discarded).
	Stdout, Stderr io.Writer

	Log logr.Logger
}

// ValidateTiming checks the election durations as client-go's elector will, plus what the
// Lease can store: its duration is a whole number of seconds, and a fraction would be
// truncated, letting a standby take over before the leader gives up.
func ValidateTiming(leaseDuration, renewDeadline, retryPeriod, stopGrace time.Duration) error {
	var errs []error
	if leaseDuration < time.Second || leaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("lease duration %s: must be a whole number of seconds, at least 1s (the Lease stores whole seconds)", leaseDuration))
	}
	if renewDeadline <= 0 {
		errs = append(errs, fmt.Errorf("renew deadline %s: must be positive", renewDeadline))
	}
	if retryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("retry period %s: must be positive", retryPeriod))
	}
	if leaseDuration <= renewDeadline {
		errs = append(errs, fmt.Errorf("lease duration %s must be greater than renew deadline %s (the gap is the time a lost leader has to stop its master before a standby may start one)", leaseDuration, renewDeadline))
	}
	if renewDeadline <= time.Duration(leaderelection.JitterFactor*float64(retryPeriod)) {
		errs = append(errs, fmt.Errorf("renew deadline %s must be greater than %.1f x retry period %s", renewDeadline, leaderelection.JitterFactor, retryPeriod))
	}
	if stopGrace < 0 {
		errs = append(errs, fmt.Errorf("stop grace %s: must not be negative", stopGrace))
	}
	return errors.Join(errs...)
}

// ValidatePeers checks the peer protocol's settings.
func ValidatePeers(peerPort int, podName string, maxHold time.Duration) error {
	var errs []error
	if peerPort < 0 || peerPort > 65535 {
		errs = append(errs, fmt.Errorf("peer port %d: must be 0 (no peer protocol) or a port", peerPort))
	}
	if peerPort > 0 && podName == "" {
		errs = append(errs, errors.New("the peer protocol needs the launcher's Pod name (peers are checked against their Pods' addresses)"))
	}
	if maxHold < 0 {
		errs = append(errs, fmt.Errorf("max hold %s: must not be negative", maxHold))
	}
	return errors.Join(errs...)
}

func (c Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("no API client"))
	}
	if c.LeaseNamespace == "" || c.LeaseName == "" {
		errs = append(errs, errors.New("the Lease needs a namespace and a name"))
	}
	if c.Identity == "" {
		errs = append(errs, errors.New("empty identity"))
	}
	if c.PodName != "" && c.PodNamespace == "" {
		errs = append(errs, errors.New("a Pod name without a namespace"))
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		errs = append(errs, errors.New("no master command"))
	}
	if err := ValidateTiming(c.LeaseDuration, c.RenewDeadline, c.RetryPeriod, c.StopGrace); err != nil {
		errs = append(errs, err)
	}
	if c.Linger < 0 {
		errs = append(errs, fmt.Errorf("linger %s: must not be negative", c.Linger))
	}
	if c.UnservedGrace < 0 {
		errs = append(errs, fmt.Errorf("unserved grace %s: must not be negative", c.UnservedGrace))
	}
	if err := ValidatePeers(c.PeerPort, c.PodName, c.MaxHold); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
