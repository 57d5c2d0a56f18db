package store

import (
	"net"
	"strconv"
	"strings"
)

// Which segments belong to a member is answered here once, for the operator (member status,
// drains) and for the binaries inside member Pods (their own drain, a fresh segment name).
// A member names its segment <MOONCAKE_LOCAL_HOSTNAME>:<port>, and every managed member sets
// that host to its Pod IP.

// SplitSegmentName splits a segment name (or a te_endpoint), <host>:<port>, into its host and
// port. The master joins them with a bare ':', so an IPv6 host comes without brackets
// ("fd00::7:13001"); a bracketed one is accepted too. ok is false when the name has no valid port
// or no host.
func SplitSegmentName(name string) (host string, port int, ok bool) {
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

// SameHost compares two hosts as addresses when both parse (so "::ffff:10.0.0.7" is 10.0.0.7
// and IPv6 spellings agree), else as strings.
func SameHost(a, b string) bool {
	x, y := net.ParseIP(a), net.ParseIP(b)
	if x != nil && y != nil {
		return x.Equal(y)
	}
	return a == b
}

// HostKey is a host spelled one way for every spelling of the same address (an IPv6 address
// compressed, an IPv4-mapped one as IPv4), for maps keyed by host; a name stays as it is.
func HostKey(host string) string {
	if ip := net.ParseIP(host); ip != nil {
		return ip.String()
	}
	return host
}

// SegmentHost is the host a segment is named after ("" when its name has no port).
func SegmentHost(s Segment) string {
	host, _, ok := SplitSegmentName(s.Name)
	if !ok {
		return ""
	}
	return host
}

// MemberSegments splits segs into the member's at podIP (its segment names carry that host and,
// when ports is not nil, its te_endpoint's port is one the member process listens on: members
// sharing an IP, as on the host network, are told apart so) and the others. The port in a
// segment's name is not listened on (measured); the transfer engine's handshake port in
// te_endpoint is. An empty podIP owns nothing.
func MemberSegments(segs []Segment, podIP string, ports map[int]bool) (own, others []Segment) {
	for _, s := range segs {
		host := SegmentHost(s)
		mine := podIP != "" && host != "" && SameHost(host, podIP)
		if mine && ports != nil {
			_, te, ok := SplitSegmentName(s.TEEndpoint)
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

// SegmentNames are the segments' names, in order.
func SegmentNames(segs []Segment) []string {
	out := make([]string, 0, len(segs))
	for _, s := range segs {
		out = append(out, s.Name)
	}
	return out
}
