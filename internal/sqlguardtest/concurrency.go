package sqlguardtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// ConcurrencyTests runs the 16-writer interleaving tests against b, one subtest each.
func ConcurrencyTests[D sqlguard.Dialector](t *testing.T, b Backend[D]) {
	t.Run("FenceTx_16Writers_HighestWinsNoLowerAfterHigher", b.concurrencyFenceTx)
	t.Run("RowUpsert_16Writers_HighestWinsNoLowerAfterHigher", b.concurrencyRowUpsert)
}

// commitOrder reads the tokens of a log table in insertion (auto-increment) order,
// which is the order the database let the transactions through.
func commitOrder(t *testing.T, d *sql.DB, table string) []fence.Token {
	t.Helper()
	rows, err := d.Query("SELECT token FROM `" + table + "` ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []fence.Token
	for rows.Next() {
		var tok fence.Token
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const logDDL = "CREATE TABLE %s (seq {AUTOID}, token {INT} NOT NULL)"

func (b *Backend[D]) concurrencyFenceTx(t *testing.T) {
	d := b.DB(t)
	g := b.NewGuard(d, "")
	data := b.table(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, token {INT} NOT NULL)")
	r := Resource(t)
	b.interleaveLogged(t, d, func(ctx context.Context, tx *sql.Tx, f fence.Fence) error {
		if err := g.FenceTx(ctx, tx, r, f); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO `"+data+"` (id, token) VALUES (1, ?)"+b.Upsert("id", "token"), int64(f.Token))
		return err
	}, "SELECT token FROM `"+data+"` WHERE id = 1")
}

func (b *Backend[D]) concurrencyRowUpsert(t *testing.T) {
	d := b.DB(t)
	table, r := b.Accounts(t, d, "balance")
	b.interleaveLogged(t, d, func(ctx context.Context, tx *sql.Tx, f fence.Fence) error {
		return r.Upsert(ctx, tx, f, 1, int64(f.Token))
	}, "SELECT balance FROM `"+table+"` WHERE id = 1")
}

// interleaveLogged runs write through runInterleaved, each attempt in a transaction
// of its own that, if write succeeds, also logs the token to a fresh log table, then
// checks the attempts against the commit order of the log and the final value that
// finalSQL reads (checkLog).
func (b *Backend[D]) interleaveLogged(t *testing.T, d *sql.DB, write func(ctx context.Context, tx *sql.Tx, f fence.Fence) error, finalSQL string) {
	t.Helper()
	ctx := context.Background()
	logT := b.table(t, d, logDDL)
	log := runInterleaved(t, func(f fence.Fence) error {
		return InTx(ctx, d, func(tx *sql.Tx) error {
			if err := write(ctx, tx, f); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO `"+logT+"` (token) VALUES (?)", int64(f.Token))
			return err
		})
	})
	var final fence.Token
	if err := d.QueryRow(finalSQL).Scan(&final); err != nil {
		t.Fatal(err)
	}
	checkLog(t, log, commitOrder(t, d, logT), final)
}

const (
	writers          = 16
	writesPerWriter  = 8
	concurrencyLease = "lease-%d"
)

// attempt is one write of the concurrency tests and its outcome.
type attempt struct {
	token   fence.Token
	err     error
	highest fence.Token // from the StaleTokenError
}

// runInterleaved has 16 goroutines write tokens g+1, g+1+16, ... (each token its own
// lease) through write, in 8 rounds: in each round all 16 race with interleaved
// tokens, so some lower token always arrives after a higher one. It returns every
// attempt.
func runInterleaved(t *testing.T, write func(f fence.Fence) error) []attempt {
	t.Helper()
	var mu sync.Mutex
	var log []attempt
	for i := 0; i < writesPerWriter; i++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < writers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tok := fence.Token(g + 1 + i*writers)
				err := write(FenceOf("lock", tok, fmt.Sprintf(concurrencyLease, tok)))
				a := attempt{token: tok, err: err}
				var st *fence.StaleTokenError
				if errors.As(err, &st) {
					a.highest = st.Highest
				}
				mu.Lock()
				log = append(log, a)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
	}
	return log
}

// checkLog checks the full accept/reject log: every error is a stale-token
// rejection whose highest is an accepted token above it; the commit order recorded
// by the database (order) is strictly increasing and is exactly the accepted set;
// and the final value is the write of the highest token.
func checkLog(t *testing.T, log []attempt, order []fence.Token, final fence.Token) {
	t.Helper()
	accepted := map[fence.Token]bool{}
	var max fence.Token
	for _, a := range log {
		if a.err == nil {
			accepted[a.token] = true
			if a.token > max {
				max = a.token
			}
		}
	}
	for _, a := range log {
		if a.err == nil {
			continue
		}
		if !errors.Is(a.err, fence.ErrStaleToken) {
			t.Fatalf("token %d: want nil or a stale-token error, got %v", a.token, a.err)
		}
		if a.highest <= a.token || !accepted[a.highest] {
			t.Fatalf("token %d rejected with highest %d: want an accepted token above it", a.token, a.highest)
		}
	}
	if len(accepted) < writesPerWriter || len(accepted) == len(log) {
		t.Fatalf("want at least one acceptance per round and some rejections, got %d accepted of %d", len(accepted), len(log))
	}
	if len(order) != len(accepted) {
		t.Fatalf("want %d committed writes (one per accepted token), got %d: %v", len(accepted), len(order), order)
	}
	for i, tok := range order {
		if !accepted[tok] {
			t.Fatalf("committed token %d was reported rejected", tok)
		}
		if i > 0 && tok <= order[i-1] {
			t.Fatalf("token %d accepted after %d: commit order %v", tok, order[i-1], order)
		}
	}
	if want := fence.Token(writers * writesPerWriter); max != want || final != want {
		t.Fatalf("want the highest token %d accepted and stored, got accepted max %d, stored %d", want, max, final)
	}
	t.Logf("%d writes: %d accepted, %d rejected", len(log), len(accepted), len(log)-len(accepted))
}
