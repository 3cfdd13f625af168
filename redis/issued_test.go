package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/redis"
)

// issuedStoreOf opens a Store on the package's server under a prefix of its own.
func issuedStoreOf(t *testing.T) *redis.Store {
	t.Helper()
	servertest.SkipIfShort(t)
	return openStore(t, "redis://"+redis.ServerAddrForExamples(), &redis.Options{Prefix: redis.PrefixForExamples()})
}

// The guard suite with fences drawn from the Store's grants, and the P9 suite.
func TestStore_GuardConformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return issuedStoreOf(t) }, fencetest.WithGuardAsIssuer())
}

func TestStore_IssuedKV(t *testing.T) {
	fencetest.TestIssuedKV(t, func(t *testing.T) fencetest.IssuingKV { return issuedStoreOf(t) })
}

// A failover that loses counter increments is simulated by lowering the counter:
// the holder of a token above it is refused as unissued until a heal raises the
// counter to its token, as the package documentation says.
func TestStore_Issued_LossyFailover_HealFixes(t *testing.T) {
	servertest.SkipIfShort(t)
	prefix := redis.PrefixForExamples()
	s := openStore(t, "redis://"+redis.ServerAddrForExamples(), &redis.Options{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name, key := "lossy-"+driver.NewLeaseID()[:8], "lossy-key-"+driver.NewLeaseID()[:8]
	// Two grants, the second still held: the counter is lowered below its token
	// but not to zero.
	first, err := s.Acquire(ctx, name, 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release = %v", err)
	}
	holder, err := s.Acquire(ctx, name, 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire = %v", err)
	}
	defer holder.Release(context.Background())
	f := holder.Fence()
	c := goredis.NewClient(&goredis.Options{Addr: redis.ServerAddrForExamples()})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, prefix+"{"+f.Name+"}:token", uint64(f.Token-1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	var ue *fence.UnissuedTokenError
	if err := s.Put(ctx, key, []byte("v"), f); !errors.As(err, &ue) || ue.Token != f.Token || ue.Last != f.Token-1 || ue.OtherLease {
		t.Fatalf("holder's Put after the counter regressed = %v, want *fence.UnissuedTokenError{Token: %d, Last: %d}", err, f.Token, f.Token-1)
	}
	if it, err := s.Get(ctx, key); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get(%q) after the refused Put = %+v, %v, want fence.ErrNotFound", key, it, err)
	}
	if err := s.Heal(ctx, f.Name, f.Token); err != nil {
		t.Fatalf("Heal = %v", err)
	}
	if err := s.Put(ctx, key, []byte("v"), f); err != nil {
		t.Fatalf("holder's Put after the heal = %v", err)
	}
}

// A late attempt of a write never replaces a later write of the same holder (P3).
func TestStore_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return issuedStoreOf(t) }, fencetest.WithGuardAsIssuer())
}
