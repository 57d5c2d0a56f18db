package member

import (
	"net"
	"strconv"
	"strings"

	"github.com/kvcache-operator/kvcache/operator/store"
)

// splitSegmentName splits a segment name, <MOONCAKE_LOCAL_HOSTNAME>:<port>, into its host and
// port. The master joins them with a bare ':', so an IPv6 host comes without brackets
// ("fd00::7:13001"); a bracketed one is accepted too. ok is false when the name has no port.
func splitSegmentName(name string) (host string, port int, ok bool) {
	i := strings.LastIndexByte(name, ':')
	if i < 0 {
		return "", 0, false
	}
	p, err := strconv.Atoi(name[i+1:])
	if err != nil || p <= 0 || p > 65535 {
		return "", 0, false
	}
	host = strings.TrimSuffix(strings.TrimPrefix(name[:i], "["), "]")
	return host, p, host != ""
}

// sameHost compares a segment's host with the Pod IP, as addresses when both parse (so
// "::ffff:10.0.0.7" is 10.0.0.7 and IPv6 spellings agree), else as strings.
func sameHost(host, podIP string) bool {
	a, b := net.ParseIP(host), net.ParseIP(podIP)
	if a != nil && b != nil {
		return a.Equal(b)
	}
	return host == podIP
}

// ownSegments splits the master's segments into this member's (the host of its name is podIP
// and, when ports is not nil, its te_endpoint's port is one the member process listens on) and
// the others. The port in a segment's name is not listened on (measured), the transfer engine's
// handshake port in te_endpoint is.
func ownSegments(segs []store.Segment, podIP string, ports map[int]bool) (own, others []store.Segment) {
	for _, s := range segs {
		host, _, ok := splitSegmentName(s.Name)
		mine := ok && sameHost(host, podIP)
		if mine && ports != nil {
			_, te, ok := splitSegmentName(s.TEEndpoint)
			mine = ok && ports[te]
		}
		if mine {
			own = append(own, s)
			continue
		}
		others = append(others, s)
	}
	return own, others
}

func names(segs []store.Segment) []string {
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		out = append(out, s.Name)
	}
	return out
}
