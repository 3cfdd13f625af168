package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/idempotency"
	"github.com/fencelock/fence/idempotency/boltstore"
	"github.com/fencelock/fence/idempotency/pgstore"
	"github.com/fencelock/fence/internal/servers/servertest"
)

const (
	lockTO    = time.Minute
	retention = time.Hour
)

func begin(t *testing.T, s idempotency.Store, key, fp string) idempotency.Claim {
	t.Helper()
	c, err := s.Begin(context.Background(), key, fp, lockTO, retention)
	if err != nil {
		t.Fatalf("Begin(%q, %q): %v", key, fp, err)
	}
	return c
}

// complete completes key for owner with resp, failing t if the store refuses.
func complete(t *testing.T, s idempotency.Store, key, owner string, resp *idempotency.Response) {
	t.Helper()
	if err := s.Complete(context.Background(), key, owner, resp, retention); err != nil {
		t.Fatalf("Complete(%q): %v", key, err)
	}
}

func wantState(t *testing.T, c idempotency.Claim, want idempotency.State) {
	t.Helper()
	if c.State != want {
		t.Fatalf("want state %v, got %v (%+v)", want, c.State, c)
	}
}

func TestStore_Begin_StartedThenInFlightThenCompletedReplays(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		s, ctx := ts.store, context.Background()
		c := begin(t, s, "k1", "fp")
		wantState(t, c, idempotency.Started)
		in := begin(t, s, "k1", "fp")
		wantState(t, in, idempotency.InFlight)
		if in.RetryAfter <= 0 || in.RetryAfter > lockTO {
			t.Fatalf("RetryAfter: want in (0, %v], got %v", lockTO, in.RetryAfter)
		}
		resp := &idempotency.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":7}`)}
		complete(t, s, "k1", c.Owner, resp)
		done := begin(t, s, "k1", "fp")
		wantState(t, done, idempotency.Completed)
		if got := done.Response; got.Status != 201 || string(got.Body) != `{"id":7}` || got.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("replayed response: want 201 application/json {\"id\":7}, got %d %q %q", got.Status, got.Header.Get("Content-Type"), got.Body)
		}
		if err := s.Complete(ctx, "k1", c.Owner, resp, retention); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("second Complete: want ErrNotOwner, got %v", err)
		}
	})
}

func TestStore_Begin_OtherFingerprint_Mismatch(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		s := ts.store
		c := begin(t, s, "k", "fp-a")
		wantState(t, begin(t, s, "k", "fp-b"), idempotency.Mismatch)
		complete(t, s, "k", c.Owner, &idempotency.Response{Status: 200})
		wantState(t, begin(t, s, "k", "fp-b"), idempotency.Mismatch)
	})
}

func TestStore_Release_LetsRetryRunAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		s, ctx := ts.store, context.Background()
		c := begin(t, s, "k", "fp")
		if err := s.Release(ctx, "k", "someone-else"); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("Release by a stranger: want ErrNotOwner, got %v", err)
		}
		if err := s.Release(ctx, "k", c.Owner); err != nil {
			t.Fatal(err)
		}
		wantState(t, begin(t, s, "k", "fp"), idempotency.Started)
	})
}

// A first request that crashed leaves its key in flight; after the lock timeout a
// retry takes it over, and the crashed request can no longer complete it.
func TestStore_LockTimeout_RetryTakesOver(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		s, ctx := ts.store, context.Background()
		first := begin(t, s, "k", "fp")
		ts.advance(t, lockTO-time.Second)
		wantState(t, begin(t, s, "k", "fp"), idempotency.InFlight)
		ts.advance(t, 2*time.Second)
		wantState(t, begin(t, s, "k", "other-fp"), idempotency.Mismatch)
		second := begin(t, s, "k", "fp")
		wantState(t, second, idempotency.Started)
		if second.Owner == first.Owner {
			t.Fatalf("takeover kept the owner %q", first.Owner)
		}
		if err := s.Complete(ctx, "k", first.Owner, &idempotency.Response{Status: 200}, retention); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("Complete by the timed-out first request: want ErrNotOwner, got %v", err)
		}
		complete(t, s, "k", second.Owner, &idempotency.Response{Status: 202})
		if got := begin(t, s, "k", "fp"); got.State != idempotency.Completed || got.Response.Status != 202 {
			t.Fatalf("want the taking-over request's 202 replayed, got %+v", got)
		}
	})
}

func TestStore_Retention_ExpiredKeyRunsAgainAndIsPurged(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		s, ctx := ts.store, context.Background()
		for _, k := range []string{"old", "old2"} {
			c := begin(t, s, k, "fp")
			complete(t, s, k, c.Owner, &idempotency.Response{Status: 200})
		}
		ts.advance(t, retention+time.Second)
		begin(t, s, "fresh", "fp")
		wantState(t, begin(t, s, "old", "another-fp"), idempotency.Started)
		n, err := s.Purge(ctx)
		if err != nil || n != 1 {
			t.Fatalf("Purge: want 1 expired record (old2) deleted, got %d, %v", n, err)
		}
		wantState(t, begin(t, s, "fresh", "fp"), idempotency.InFlight)
	})
}

func TestStore_ConcurrentBegin_OneStarted(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		var wg sync.WaitGroup
		states := make(chan idempotency.State, 16)
		start := make(chan struct{})
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				c, err := ts.store.Begin(context.Background(), "same", "fp", lockTO, retention)
				if err != nil {
					t.Error(err)
					return
				}
				states <- c.State
			}()
		}
		close(start)
		wg.Wait()
		close(states)
		count := map[idempotency.State]int{}
		for s := range states {
			count[s]++
		}
		if count[idempotency.Started] != 1 || count[idempotency.InFlight] != 15 {
			t.Fatalf("want 1 started and 15 in flight, got %v", count)
		}
	})
}

func TestStore_BadInput_Invalid(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		s, ctx := ts.store, context.Background()
		cases := map[string]error{}
		_, cases["empty key"] = s.Begin(ctx, "", "fp", lockTO, retention)
		_, cases["empty fingerprint"] = s.Begin(ctx, "k", "", lockTO, retention)
		_, cases["zero lock timeout"] = s.Begin(ctx, "k", "fp", 0, retention)
		_, cases["long key"] = s.Begin(ctx, string(make([]byte, idempotency.MaxKeyLen+1)), "fp", lockTO, retention)
		cases["complete without owner"] = s.Complete(ctx, "k", "", &idempotency.Response{}, retention)
		cases["complete nil response"] = s.Complete(ctx, "k", "o", nil, retention)
		for name, err := range cases {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Errorf("%s: want fence.ErrInvalid, got %v", name, err)
			}
		}
		wantState(t, begin(t, s, "k", "fp"), idempotency.Started)
	})
}

func TestPostgresStore_MissingTableAndBadName(t *testing.T) {
	pool := servertest.Pool(t, dsn)
	ctx := context.Background()
	_, err := pgstore.New(pool, &pgstore.Options{Table: "no_such_table"}).Begin(ctx, "k", "fp", lockTO, retention)
	if !errors.Is(err, pgstore.ErrSchema) {
		t.Fatalf("missing table: want ErrSchema, got %v", err)
	}
	_, err = pgstore.New(pool, &pgstore.Options{Table: `x"; drop table y`}).Begin(ctx, "k", "fp", lockTO, retention)
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("bad table name: want fence.ErrInvalid, got %v", err)
	}
}

func TestBoltStore_Closed_ErrClosed(t *testing.T) {
	s, err := boltstore.Open(fmt.Sprintf("%s/x.db", t.TempDir()), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Begin(context.Background(), "k", "fp", lockTO, retention); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("want fence.ErrClosed, got %v", err)
	}
}

func TestPostgresStore_ClosedPool_ErrClosed(t *testing.T) {
	pool := servertest.Pool(t, dsn)
	s := pgstore.New(pool, nil)
	pool.Close()
	if _, err := s.Begin(context.Background(), "k", "fp", lockTO, retention); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("want fence.ErrClosed, got %v", err)
	}
}
