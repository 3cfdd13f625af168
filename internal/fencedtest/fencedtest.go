// Package fencedtest holds what the tests of the resource-side middlewares share
// (fencehttp.Fenced and FencedTx, the fencegrpc interceptors): the real guards
// they run over, and the check that concurrent writers are stored in token order.
package fencedtest

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/inmem"
)

// EachGuard runs test as a subtest of t once for each guard a middleware is tested
// over, each time on a fresh one: "inmem", the in-process reference, and "bolt",
// the embedded durable store (see OpenBolt).
func EachGuard(t *testing.T, test func(t *testing.T, g fence.Guard)) {
	t.Run("inmem", func(t *testing.T) { test(t, inmem.NewGuard()) })
	t.Run("bolt", func(t *testing.T) { test(t, OpenBolt(t)) })
}

// OpenBolt returns a bolt store in t's temporary directory, without fsync (the
// tests crash no machine), closed when t ends. It fails t if the store does not
// open.
func OpenBolt(t testing.TB) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "guard.db"), &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatalf("bolt.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Issue makes tokens 1..upTo of name count as issued by g when g is a store that
// grants the locks it fences (a fence.Locker, such as a bolt store, which
// refuses tokens it never issued, P9): it acquires and releases name until a
// grant's token reaches upTo. Lease ids are not checked for ended leases, so the
// tests' made-up lease ids stay valid. For any other guard it does nothing.
func Issue(t testing.TB, g fence.Guard, name string, upTo fence.Token) {
	t.Helper()
	l, ok := g.(fence.Locker)
	if !ok {
		return
	}
	ctx := context.Background()
	for {
		lease, err := l.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("issue %q: %v", name, err)
		}
		if err := l.Release(ctx, name, lease.ID()); err != nil {
			t.Fatalf("issue %q: %v", name, err)
		}
		if lease.Token() >= upTo {
			return
		}
	}
}

// Shuffled returns the tokens 1..n in a fixed order: the i-th is (i*step)%n + 1.
// step must share no factor with n, or tokens repeat.
func Shuffled(n, step int) []fence.Token {
	toks := make([]fence.Token, n)
	for i := range toks {
		toks[i] = fence.Token((i*step)%n + 1)
	}
	return toks
}

// WriteAll runs write once for every token of toks, all at once, each from a
// goroutine of its own, and returns how many writes were accepted once all have
// answered. write reports an accepted write, or the highest token a refusal
// named, or an error for any other answer. WriteAll fails t for such an error
// and for a refusal that names no token higher than the one refused.
func WriteAll(t *testing.T, toks []fence.Token, write func(tok fence.Token) (accepted bool, highest fence.Token, err error)) int {
	t.Helper()
	var wg sync.WaitGroup
	var accepted, refused atomic.Int64
	for _, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, highest, err := write(tok)
			switch {
			case err != nil:
				t.Errorf("token %d: %v", tok, err)
			case ok:
				accepted.Add(1)
			default:
				refused.Add(1)
				if highest <= tok {
					t.Errorf("token %d refused with highest %d, want a higher one", tok, highest)
				}
			}
		}()
	}
	wg.Wait()
	if n := accepted.Load() + refused.Load(); n != int64(len(toks)) {
		t.Fatalf("accepted %d, refused %d; want accepted+refused = %d", accepted.Load(), refused.Load(), len(toks))
	}
	return int(accepted.Load())
}

// WantTokenOrder fails t unless stored, the tokens a resource stored in the order
// it stored them, rises strictly, holds one token per accepted write, and ends
// with last (the highest token written).
func WantTokenOrder(t *testing.T, stored []fence.Token, accepted int, last fence.Token) {
	t.Helper()
	for i := 1; i < len(stored); i++ {
		if stored[i] <= stored[i-1] {
			t.Fatalf("stored tokens in the order %v: %d after %d", stored, stored[i], stored[i-1])
		}
	}
	if len(stored) != accepted || len(stored) == 0 || stored[len(stored)-1] != last {
		t.Fatalf("stored %v with %d writes accepted; want one per accepted write, ending with %d", stored, accepted, last)
	}
}
