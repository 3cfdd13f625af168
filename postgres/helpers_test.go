package postgres_test

import (
	"errors"
	"testing"

	"github.com/fencelock/fence"
)

// wantIs fails t unless errors.Is(err, target).
func wantIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want one matching %v", what, err, target)
	}
}

// wantOK fails t if err is not nil.
func wantOK(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", what, err)
	}
}

// wantStale fails t unless err is a *fence.StaleTokenError with the given highest.
func wantStale(t testing.TB, what string, err error, highest fence.Token) {
	t.Helper()
	var st *fence.StaleTokenError
	if !errors.As(err, &st) {
		t.Fatalf("%s: error = %v, want a *fence.StaleTokenError", what, err)
	}
	if st.Highest != highest {
		t.Fatalf("%s: StaleTokenError.Highest = %d, want %d (error %v)", what, st.Highest, highest, err)
	}
}

// fenceOf is a fence of lock name with a lease id derived from the token, so
// each token is its own lease.
func fenceOf(name string, tok fence.Token) fence.Fence {
	return fence.Fence{Name: name, Token: tok, LeaseID: "lease-" + tok.String()}
}
