package operator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/kvcache-operator/kvcache/store"
)

// Describe says what went wrong with a store read in words that stay the same while the cause
// stays the same: a condition message must not carry an ephemeral port or a resolver's text, or
// every poll would rewrite status with nothing new to say. The raw error goes to logs and
// metrics.
func Describe(err error) string {
	var se *store.Error
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se) && se.Code != 0:
		return fmt.Sprintf("the store refused %s: %s (%d)", se.Op, se.Message, se.Code)
	case errors.As(err, &se):
		return fmt.Sprintf("the store answered %s with HTTP %d", se.Op, se.HTTPStatus)
	case errors.Is(err, store.ErrRedirect):
		return "the admin endpoint answered with a redirect, which is not followed"
	case errors.Is(err, store.ErrBodyTooLarge):
		return "the admin endpoint's answer exceeded the size limit"
	case errors.As(err, &dns):
		return fmt.Sprintf("the name %s does not resolve", dns.Name)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "the admin endpoint did not answer in time"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the admin endpoint refused the connection: nothing listens there"
	case errors.Is(err, syscall.ECONNRESET):
		return "the admin endpoint reset the connection"
	case errors.As(err, &op):
		return fmt.Sprintf("the admin endpoint is unreachable (%s)", op.Op)
	default:
		return "the admin endpoint could not be read"
	}
}
