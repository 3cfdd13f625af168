package fencehttp_test

import (
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// boltHasHolders tells whether the bolt store stores owners and revokes
// (fence.Revoker): until it does, the suite's owner and revoke subtests are
// skipped on it, saying so, and run over inmem only. Once bolt has both, nothing
// is skipped; then this can go.
var boltHasHolders = func() bool {
	_, ok := any((*bolt.Store)(nil)).(fence.Revoker)
	return ok
}()

// holderSubtests are the suite's subtests of owners and revoke.
var holderSubtests = []string{"Owner_ReportedWhileHeldNeverTheLeaseID", "Revoker_"}

// skipHoldersOnBolt skips t, a subtest of the Locker suite, if it checks owners or
// revoke and the bolt store has neither yet.
func skipHoldersOnBolt(t *testing.T) {
	t.Helper()
	if boltHasHolders {
		return
	}
	for _, name := range holderSubtests {
		if strings.Contains(t.Name(), "/"+name) {
			t.Skip("the bolt store has no owners or revoke yet; the inmem run checks them over HTTP")
		}
	}
}

// The client against a live server passes the Locker suite (leases, tokens,
// expiry, waits woken by release, Inspector, Healer, owners, Revoker) over HTTP,
// on the bolt store (the default of `fence serve`) and on inmem (the reference).
// Each subtest gets a server on a store of its own: bolt's Heal raises one counter
// for every name, and the suite heals one to MaxToken.
func TestClient_LockerConformance(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
			skipHoldersOnBolt(t)
			_, hs, _ := newBoltServer(t, fencehttp.Config{})
			return mustClient(t, hs.URL, nil)
		})
	})
	t.Run("inmem", func(t *testing.T) {
		fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
			_, hs := newServer(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
			return mustClient(t, hs.URL, nil)
		})
	})
}

// The client's fenced KV (PUT/GET /v1/kv, POST /v1/fences) passes the Guard suite,
// against the package's shared server.
func TestClient_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return shared.client })
}
