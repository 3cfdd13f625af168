package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/internal/service"
)

func newService(t *testing.T, cfg service.Config) *service.Service {
	t.Helper()
	if cfg.Locker == nil {
		store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		cfg.Locker, cfg.KV = store, store
	}
	s, err := service.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Each operation word of Permit asks for its right on its name: what a wire
// maps its routes or commands to.
func TestPermit_EachOperationItsRight(t *testing.T) {
	tok := func(r service.Rights, names ...string) *service.AuthToken {
		return &service.AuthToken{Secret: []byte("s"), Rights: r, Names: names}
	}
	for _, c := range []struct {
		tok      *service.AuthToken
		op, name string
		allowed  bool
	}{
		{tok(service.RightRead, "jobs/*"), "inspect", "jobs/a", true},
		{tok(service.RightRead, "jobs/*"), "watch", "jobs/a", true},
		{tok(service.RightRead, "jobs/*"), "inspect", "other", false},
		{tok(service.RightRead, "jobs/*"), "list", "jobs/", true},
		{tok(service.RightRead, "jobs/*"), "list", "", false},
		{tok(service.RightRead, "jobs/*"), "acquire", "jobs/a", false},
		{tok(service.RightLock, "jobs/*"), "acquire", "jobs/a", true},
		{tok(service.RightLock, "jobs/*"), "renew", "jobs/a", true},
		{tok(service.RightLock, "jobs/*"), "release", "jobs/a", true},
		{tok(service.RightLock, "jobs/*"), "revoke", "jobs/a", false},
		{tok(service.RightAdmin, "jobs/*"), "revoke", "jobs/a", true},
		{tok(service.RightAdmin, "jobs/*"), "heal", "jobs/a", true},
		{tok(service.RightRead, "ledger"), "get", "ledger", true},
		{tok(service.RightRead, "ledger"), "put", "ledger", false},
		{tok(service.RightWrite, "ledger"), "put", "ledger", true},
		{tok(service.RightWrite, "ledger"), "delete", "ledger", true},
		{tok(service.RightWrite, "ledger"), "fence", "ledger", true},
		{tok(service.RightWrite, "ledger"), "purge", "ledger", false},
		{tok(service.RightAdmin, "ledger"), "purge", "ledger", true},
		{tok(service.RightLock), "metrics", "", false},
		{tok(service.RightAdmin, "jobs/*"), "metrics", "", true},
		{tok(service.RightRead), "cluster status", "", true},
		{tok(service.RightAdmin, "jobs/*"), "cluster admin", "", false},
		{tok(service.RightsAll), "cluster admin", "", true},
		{tok(service.RightsAll, "*"), "no such op", "x", false},
	} {
		err := c.tok.Permit(c.op, c.name)
		switch {
		case c.allowed && err != nil:
			t.Errorf("%s may %s %q: got %v", c.tok.Rights, c.op, c.name, err)
		case !c.allowed && (!errors.Is(err, service.ErrForbidden) || service.Code(err) != "forbidden"):
			t.Errorf("%s may not %s %q: got %v (code %q), want forbidden", c.tok.Rights, c.op, c.name, err, service.Code(err))
		}
	}
}

// Authenticate finds a token by its secret alone, and AuthRequired says
// whether there are tokens at all.
func TestAuthenticate(t *testing.T) {
	if s := newService(t, service.Config{}); s.AuthRequired() {
		t.Fatal("AuthRequired without tokens")
	}
	s := newService(t, service.Config{Tokens: []service.AuthToken{
		{Secret: []byte("a"), Rights: service.RightRead},
		{Secret: []byte("b"), Rights: service.RightsAll},
	}})
	if !s.AuthRequired() {
		t.Fatal("AuthRequired false with tokens")
	}
	if tok := s.Authenticate("b"); tok == nil || tok.Rights != service.RightsAll {
		t.Fatalf("Authenticate(b) = %v; want the admin token", tok)
	}
	for _, secret := range []string{"", "c", "ab", " a"} {
		if tok := s.Authenticate(secret); tok != nil {
			t.Errorf("Authenticate(%q) = %v; want nil", secret, tok)
		}
	}
}

// An acquire that does not wait is refused held, with the holder's time left;
// its message and code are what every wire answers.
func TestAcquire_HeldWithoutWait_CodeAndMessage(t *testing.T) {
	s := newService(t, service.Config{})
	ctx := context.Background()
	ttl := int64(60000)
	g, err := s.Acquire(ctx, "job", service.AcquireRequest{TTLms: &ttl, Owner: "a"})
	if err != nil || g.Name != "job" || g.Token == 0 || g.ID == "" || g.TTL != time.Minute || g.Slot != nil {
		t.Fatalf("first acquire = %+v, %v", g, err)
	}
	_, err = s.Acquire(ctx, "job", service.AcquireRequest{TTLms: &ttl})
	var held *fence.HeldError
	if service.Code(err) != "held" || !errors.As(err, &held) || held.ExpiresIn <= 0 {
		t.Fatalf("second acquire: want held with a time left, got %v", err)
	}
	if msg := service.Message("acquire", "job", err); !strings.HasPrefix(msg, `lock "job" is held (expires in `) {
		t.Fatalf("message = %q", msg)
	}
	if err := s.Release(ctx, "job", service.ReleaseRequest{Lease: g.ID}); err != nil {
		t.Fatal(err)
	}
	err = s.Release(ctx, "job", service.ReleaseRequest{Lease: g.ID})
	if service.Code(err) != "not_held" {
		t.Fatalf("second release: want not_held, got %v", err)
	}
	if err := s.Revoke(ctx, "job"); service.Code(err) != "not_held" || !errors.Is(err, service.ErrNothingToRevoke) {
		t.Fatalf("revoke of a free lock: want not_held of ErrNothingToRevoke, got %v", err)
	}
}

// A drain ends a waiting acquire at once with ErrShuttingDown (unavailable).
func TestDrain_EndsWaitingAcquire(t *testing.T) {
	s := newService(t, service.Config{})
	ctx := context.Background()
	ttl := int64(60000)
	if _, err := s.Acquire(ctx, "job", service.AcquireRequest{TTLms: &ttl}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "job", service.AcquireRequest{TTLms: &ttl, WaitMs: 30000})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait (or not: a drain before it waits ends it too)
	s.Drain()
	select {
	case err := <-done:
		if !errors.Is(err, service.ErrShuttingDown) || service.Code(err) != "unavailable" {
			t.Fatalf("waiting acquire after Drain: want ErrShuttingDown (unavailable), got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting acquire outlived Drain by 10s")
	}
	if !s.Draining() {
		t.Fatal("Draining false after Drain")
	}
}
