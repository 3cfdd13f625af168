package fencehttp_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// The client against a live server passes the Locker suite (leases, tokens,
// expiry, waits woken by release, Inspector, Healer, owners, Revoker) over HTTP,
// on the bolt store (the default of `fence serve`) and on inmem (the reference).
// Each subtest gets a server on a store of its own: bolt's Heal raises one counter
// for every name, and the suite heals one to MaxToken.
func TestClient_LockerConformance(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
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

// The client's fenced KV (PUT/GET/DELETE /v1/kv, POST /v1/fences) passes the
// Guard suite, against the package's shared server on the bolt store, drawing
// its fences from that server's grants (the store refuses fences it never
// issued), and on the inmem guard with made-up fences.
func TestClient_GuardConformance(t *testing.T) {
	t.Run("bolt", func(t *testing.T) {
		fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return shared.client }, fencetest.WithIssuer(shared.client))
	})
	t.Run("inmem", func(t *testing.T) {
		_, hs := newServer(t, fencehttp.Config{})
		c := mustClient(t, hs.URL, nil)
		fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return c })
	})
}

// Over HTTP, the bolt store refuses fences it never issued (P9) with 409
// unissued_token, which the client turns back into *fence.UnissuedTokenError;
// DELETE keeps the fence and purge removes it.
func TestClient_IssuedKVConformance(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return shared.client })
}
