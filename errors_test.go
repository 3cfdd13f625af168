package fence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fencelock/fence"
)

// CheckLeaseGiven refuses only a fence without a lease id whose token a live
// lease holds, with a *LeaseRequiredError that matches ErrLeaseRequired (also
// wrapped, as backends return it) and no other sentinel.
func TestCheckLeaseGiven_RefusesOnlyALiveTokenWithoutLease(t *testing.T) {
	bare := fence.Fence{Name: "job", Token: 7}
	withLease := fence.Fence{Name: "job", Token: 7, LeaseID: "0123456789abcdef0123456789abcdef"}
	for _, c := range []struct {
		what string
		f    fence.Fence
		live bool
	}{{"with a lease id, live", withLease, true}, {"with a lease id, ended", withLease, false}, {"without, ended", bare, false}} {
		if err := fence.CheckLeaseGiven(c.f, c.live); err != nil {
			t.Errorf("CheckLeaseGiven(%s) = %v; want nil", c.what, err)
		}
	}
	err := fmt.Errorf("bolt: put %q: %w", "k", fence.CheckLeaseGiven(bare, true))
	var le *fence.LeaseRequiredError
	if !errors.As(err, &le) || *le != (fence.LeaseRequiredError{Lock: "job", Token: 7}) || !errors.Is(err, fence.ErrLeaseRequired) {
		t.Fatalf("CheckLeaseGiven(without, live) = %v; want a *LeaseRequiredError{job 7} matching ErrLeaseRequired", err)
	}
	for _, other := range []error{fence.ErrUnissuedToken, fence.ErrStaleToken, fence.ErrInvalid} {
		if errors.Is(err, other) {
			t.Errorf("the LeaseRequiredError matches %v; want only ErrLeaseRequired", other)
		}
	}
	if want := `fence: token 7 of lock "job" belongs to a live lease: a write with it must carry that lease's id`; le.Error() != want {
		t.Errorf("Error() = %q; want %q", le.Error(), want)
	}
}
