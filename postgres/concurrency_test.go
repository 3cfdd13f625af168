package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5"
)

const (
	writers        = 16
	tokensPerGor   = 6
	writesPerToken = 2
)

// outcome is one fenced write as a writer saw it.
type outcome struct {
	tok     fence.Token
	ok      bool
	highest fence.Token // for a rejection: the highest the guard reported
}

// interleave runs 16 writers; writer w owns tokens w+1, w+1+16, ... and writes
// each twice under its lease, in increasing order, all at once, so the tokens
// reach the guard interleaved. write must record an accepted write in the
// resource's entries (in the same transaction). It returns every outcome.
func interleave(t *testing.T, write func(ctx context.Context, f fence.Fence) error) []outcome {
	t.Helper()
	ctx := ctxT(t)
	lock := uniq(t, "lock")
	var (
		mu   sync.Mutex
		log  []outcome
		wg   sync.WaitGroup
		fail = make(chan error, writers)
	)
	start := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			for i := 0; i < tokensPerGor; i++ {
				tok := fence.Token(w + 1 + i*writers)
				for j := 0; j < writesPerToken; j++ {
					err := write(ctx, fenceOf(lock, tok))
					o := outcome{tok: tok, ok: err == nil}
					var st *fence.StaleTokenError
					switch {
					case err == nil:
					case errors.As(err, &st):
						o.highest = st.Highest
					default:
						fail <- err
						return
					}
					mu.Lock()
					log = append(log, o)
					mu.Unlock()
				}
			}
		}(w)
	}
	close(start)
	wg.Wait()
	close(fail)
	for err := range fail {
		t.Fatalf("a writer failed with an error that is not a refusal: %v", err)
	}
	return log
}

// checkHistory checks the accept/reject log and the accepted order stored in the
// database: tokens never go down in the accepted order, each rejection names a
// higher token that was accepted, and the highest token is the final state.
func checkHistory(t *testing.T, log []outcome, accepted []int64, final fence.Token) {
	t.Helper()
	if want := writers * tokensPerGor * writesPerToken; len(log) != want {
		t.Fatalf("%d outcomes, want %d", len(log), want)
	}
	acceptedSet := map[fence.Token]int{}
	nAccepted := 0
	for _, o := range log {
		if o.ok {
			acceptedSet[o.tok]++
			nAccepted++
		}
	}
	for _, o := range log {
		if !o.ok && (o.highest <= o.tok && !(o.highest == o.tok && acceptedSet[o.tok] > 0)) {
			t.Fatalf("token %d was rejected with highest %d: a rejection must name a higher (or equal, other-lease) token", o.tok, o.highest)
		}
		if !o.ok && acceptedSet[o.highest] == 0 {
			t.Fatalf("token %d was rejected citing highest %d, which no writer had accepted", o.tok, o.highest)
		}
	}
	if len(accepted) != nAccepted {
		t.Fatalf("the resource recorded %d accepted writes, the writers saw %d accepted", len(accepted), nAccepted)
	}
	for i := 1; i < len(accepted); i++ {
		if accepted[i] < accepted[i-1] {
			t.Fatalf("accepted order %v: token %d accepted after %d", accepted, accepted[i], accepted[i-1])
		}
	}
	maxTok := fence.Token(writers * tokensPerGor)
	if acceptedSet[maxTok] != writesPerToken {
		t.Fatalf("the highest token %d was accepted %d times, want %d (nothing is above it)", maxTok, acceptedSet[maxTok], writesPerToken)
	}
	if final != maxTok {
		t.Fatalf("final state carries token %d, want the highest, %d", final, maxTok)
	}
	t.Logf("%d writes: %d accepted, %d rejected", len(log), nAccepted, len(log)-nAccepted)
}

func TestGuard_Concurrent16Writers_HighestWinsNoLowerAcceptedAfterHigher(t *testing.T) {
	g := postgres.NewGuard(sharedPool, nil)
	res := uniq(t, "res")
	log := interleave(t, func(ctx context.Context, f fence.Fence) error {
		return g.Do(ctx, res, f, insertEntry(ctx, res, f.Token, "w"))
	})
	h, err := g.Highest(ctxT(t), res)
	wantOK(t, "Highest", err)
	checkHistory(t, log, entryTokens(t, sharedPool, res), h.Token)
}

func TestRow_Concurrent16Writers_HighestWinsNoLowerAcceptedAfterHigher(t *testing.T) {
	id := uniq(t, "acct")
	log := interleave(t, func(ctx context.Context, f fence.Fence) error {
		return pgx.BeginFunc(ctx, sharedPool, func(tx pgx.Tx) error {
			if err := accounts.Upsert(ctx, tx, f, id, int64(f.Token)); err != nil {
				return err
			}
			return insertEntry(ctx, id, f.Token, "row")(tx)
		})
	})
	bal, tok := balance(t, sharedPool, id)
	if bal != tok {
		t.Fatalf("balance %d was written with token %d, want the value of the highest write", bal, tok)
	}
	checkHistory(t, log, entryTokens(t, sharedPool, id), fence.Token(tok))
}
