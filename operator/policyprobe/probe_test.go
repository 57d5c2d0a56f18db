package policyprobe

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The probe's verdict from real dials: an accepted connection and a refused one both prove
// packets get through; a dial that runs out of time is a dropped packet; an address that
// cannot be dialled at all proves nothing.
func TestJudgeProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusing := closed.Addr().String()
	require.NoError(t, closed.Close())

	dial := func(addr string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if c != nil {
			_ = c.Close()
		}
		return err
	}
	v, detail := judgeProbe(dial(ln.Addr().String(), time.Second))
	assert.Equal(t, probeNotEnforced, v, detail)
	v, detail = judgeProbe(dial(refusing, time.Second))
	assert.Equal(t, probeNotEnforced, v, detail)
	assert.Equal(t, "its node refused it", detail)
	// A deadline already past: the dial ends as a timeout, as when the first packet is dropped.
	v, detail = judgeProbe(dial(ln.Addr().String(), -time.Second))
	assert.Equal(t, probeEnforced, v, detail)
	v, _ = judgeProbe(dial("no-such-host.invalid:50051", time.Second))
	assert.Equal(t, probeUnknown, v)
}
