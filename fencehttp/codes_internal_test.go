package fencehttp

import (
	"net/http"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/service"
)

// Every error code of the service has its HTTP status in the one table
// (statusOfCode); only "internal" is 500.
func TestStatusOfCode_EveryServiceCode(t *testing.T) {
	for _, code := range service.Codes() {
		status, ok := statusOfCode[code]
		switch {
		case code == "internal" && ok:
			t.Errorf("statusOfCode has %q: it is the 500 of an unknown error", code)
		case code != "internal" && !ok:
			t.Errorf("statusOfCode lacks the service's code %q: it would be answered 500", code)
		case ok && status >= 500 && code != "not_implemented" && code != "unavailable":
			t.Errorf("code %q is %d: a refusal of the request is no server error", code, status)
		}
	}
	for code := range statusOfCode {
		found := false
		for _, c := range service.Codes() {
			found = found || c == code
		}
		if !found {
			t.Errorf("statusOfCode has %q, which the service never gives", code)
		}
	}
	// One code, two statuses: a revoke of a free lock is 404, a lease that is
	// gone 410; both are "not_held".
	for _, c := range []struct {
		err    error
		status int
	}{
		{service.Because(service.ErrNothingToRevoke, "nothing to revoke"), http.StatusNotFound},
		{fence.ErrNotHeld, http.StatusGone},
	} {
		if status, code := statusOf(c.err); status != c.status || code != "not_held" {
			t.Errorf("statusOf(%v) = %d %q; want %d not_held", c.err, status, code, c.status)
		}
	}
}
