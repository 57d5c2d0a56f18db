package store

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSplitSegmentName(t *testing.T) {
	cases := []struct {
		name, host string
		port       int
		ok         bool
	}{
		{"10.0.0.7:13001", "10.0.0.7", 13001, true},
		{"fd00::7:13001", "fd00::7", 13001, true},
		{"[fd00::7]:13001", "fd00::7", 13001, true},
		{"node-1.example:12300", "node-1.example", 12300, true},
		{"10.0.0.7", "", 0, false},
		{"10.0.0.7:", "", 0, false},
		{"10.0.0.7:x", "", 0, false},
		{"10.0.0.7:70000", "", 0, false},
		{":13001", "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host, port, ok := SplitSegmentName(tc.name)
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.host, host)
				assert.Equal(t, tc.port, port)
			}
		})
	}
}

func TestMemberSegments(t *testing.T) {
	segs := []Segment{
		{Name: "10.0.0.7:13001", TEEndpoint: "10.0.0.7:15001"}, {Name: "10.0.0.70:13001", TEEndpoint: "10.0.0.70:15002"},
		{Name: "10.0.0.7:14002", TEEndpoint: "10.0.0.7:16002"}, {Name: "10.0.0.8:13001", TEEndpoint: "10.0.0.8:15001"},
		{Name: "fd00::7:12999", TEEndpoint: "fd00::7:15999"}, {Name: "garbage"},
	}
	cases := []struct {
		name        string
		podIP       string
		ports       map[int]bool
		own, others []string
	}{
		{"the Pod's IP, every port", "10.0.0.7", nil,
			[]string{"10.0.0.7:13001", "10.0.0.7:14002"},
			[]string{"10.0.0.70:13001", "10.0.0.8:13001", "fd00::7:12999", "garbage"}},
		{"a shared IP told apart by the member's ports (te_endpoint's)", "10.0.0.7", map[int]bool{16002: true, 13001: true, 40000: true},
			[]string{"10.0.0.7:14002"},
			[]string{"10.0.0.7:13001", "10.0.0.70:13001", "10.0.0.8:13001", "fd00::7:12999", "garbage"}},
		{"an IPv6 Pod IP in another spelling", "fd00:0::7", nil,
			[]string{"fd00::7:12999"},
			[]string{"10.0.0.7:13001", "10.0.0.70:13001", "10.0.0.7:14002", "10.0.0.8:13001", "garbage"}},
		{"no segment of this Pod", "10.0.0.9", nil,
			nil,
			[]string{"10.0.0.7:13001", "10.0.0.70:13001", "10.0.0.7:14002", "10.0.0.8:13001", "fd00::7:12999", "garbage"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			own, others := MemberSegments(segs, tc.podIP, tc.ports)
			if tc.own == nil {
				assert.Empty(t, own)
			} else {
				assert.Equal(t, tc.own, SegmentNames(own))
			}
			assert.Equal(t, tc.others, SegmentNames(others))
		})
	}
}

func TestSameHostAndHostKey(t *testing.T) {
	cases := []struct {
		a, b string
		same bool
	}{
		{"10.0.0.7", "10.0.0.7", true},
		{"::ffff:10.0.0.7", "10.0.0.7", true},
		{"fd00:0::7", "fd00::7", true},
		{"FD00::7", "fd00::7", true},
		{"fd00::7", "fd00::70", false},
		{"10.0.0.7", "10.0.0.70", false},
		{"node-1", "node-1", true},
		{"node-1", "10.0.0.7", false},
	}
	for _, tc := range cases {
		t.Run(tc.a+" and "+tc.b, func(t *testing.T) {
			assert.Equal(t, tc.same, SameHost(tc.a, tc.b))
			assert.Equal(t, tc.same, HostKey(tc.a) == HostKey(tc.b), "the map keys agree with SameHost")
		})
	}
}

func TestAMemberWithoutAnIPOwnsNothing(t *testing.T) {
	own, others := MemberSegments([]Segment{{Name: ":13001"}, {Name: "10.0.0.7:13001"}}, "", nil)
	assert.Empty(t, own)
	assert.Len(t, others, 2)
}
