package fencehttp_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
)

// The client against a live server on the bolt store passes the Locker suite
// (leases, tokens, expiry, waits woken by release, Inspector) over HTTP.
func TestClient_LockerConformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return shared.client })
}

// The client's fenced KV (PUT/GET /v1/kv, POST /v1/fences) passes the Guard suite.
func TestClient_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return shared.client })
}
