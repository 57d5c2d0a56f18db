package operator

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kvcache-operator/kvcache/store"
)

// The same cause reads the same in a condition, whatever ephemeral detail the error carried, so
// a poll of an unreachable store does not rewrite status.
func TestDescribeIsStableForOneCause(t *testing.T) {
	refused := func(port int) error {
		return fmt.Errorf("GET /health: %w", &net.OpError{Op: "dial", Net: "tcp",
			Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: port}, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	}
	assert.Equal(t, Describe(refused(43562)), Describe(refused(51000)))
	assert.Equal(t, "the admin endpoint refused the connection: nothing listens there", Describe(refused(1)))

	dns := func(server string) error {
		return fmt.Errorf("GET /api/v1/tenant_quotas: %w", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x-leader.gpustack-system.svc", Server: server, IsNotFound: true}})
	}
	assert.Equal(t, Describe(dns("10.255.255.53:53")), Describe(dns("10.96.0.10:53")))
	assert.Equal(t, "the name x-leader.gpustack-system.svc does not resolve", Describe(dns("")))

	assert.Equal(t, "the admin endpoint did not answer in time", Describe(fmt.Errorf("GET /health: %w", context.DeadlineExceeded)))
	assert.Equal(t, "the store refused PUT /api/v1/tenant_quotas?tenant_id=a: TENANT_NOT_EMPTY (-1702)",
		Describe(&store.Error{Op: "PUT /api/v1/tenant_quotas?tenant_id=a", HTTPStatus: 409, Code: -1702, Message: "TENANT_NOT_EMPTY"}))
	assert.Equal(t, "the store answered GET /metrics with HTTP 503", Describe(&store.Error{Op: "GET /metrics", HTTPStatus: 503}))
	assert.Equal(t, "the admin endpoint reset the connection", Describe(fmt.Errorf("read: %w", syscall.ECONNRESET)))
	assert.Empty(t, Describe(nil))
}
