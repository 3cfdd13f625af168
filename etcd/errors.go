package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// ErrCorrupt means a record under the store's prefix could not be decoded: it was
// written by something other than this package (or by hand). Nothing was changed.
var ErrCorrupt = errors.New("etcd: corrupt record")

// storeErr translates an error of the etcd client into the fence sentinels, keeping
// the original for errors.Is/As (a context error stays matchable): a closed client is
// fence.ErrClosed, a missing lease fence.ErrNotHeld, anything else (no endpoint, no
// leader, timeouts, cancellation) fence.ErrUnavailable. The caller adds context.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	var unav *fence.UnavailableError
	switch {
	case errors.As(err, &unav):
		return err // says why already (cluster mode: no leader)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %w", fence.ErrNotHeld, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
	case errors.Is(err, clientv3.ErrNoAvailableEndpoints):
		return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Canceled:
			// The client connection was closed under us.
			if s.Message() == "grpc: the client connection is closing" {
				return fmt.Errorf("%w: %s", fence.ErrClosed, s.Message())
			}
			return fmt.Errorf("%w: %s", fence.ErrUnavailable, s.Message())
		case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
			if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrTooManyOps) {
				return fmt.Errorf("%w: %s", fence.ErrInvalid, s.Message())
			}
		}
	}
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
}

// transient marks fence.ErrUnavailable (a leader election, a short partition) as an
// error that a waiting acquire rides out (see driver.Transient); other errors stay
// as they are.
func transient(err error) error {
	if errors.Is(err, fence.ErrUnavailable) {
		return driver.Transient(err)
	}
	return err
}

// invalid returns a *fence.InvalidError (matching fence.ErrInvalid).
func invalid(field, value, reason string) error {
	return &fence.InvalidError{Field: field, Value: value, Reason: reason}
}
