package fencehttp_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/fencedtest"
	"github.com/fencelock/fence/internal/servers/servertest"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// snapshotDDL is the resource of the FencedTx tests: a snapshot row per id,
// written only in the transaction that admits the fence, and a log of the writes
// in the order they happened (id from a sequence, taken inside the transaction).
const snapshotDDL = `
CREATE TABLE snapshots (id text PRIMARY KEY, data text NOT NULL, token bigint NOT NULL);
CREATE TABLE write_log (seq bigserial PRIMARY KEY, id text NOT NULL, token bigint NOT NULL)`

// pgSnapshotService is a FencedTx handler over PostgreSQL: PUT /snapshots/{id}
// stores the body; a body "bad" is refused by the handler with its own 400 after it
// wrote; a body "boom" fails without an answer; "panic" panics.
func pgSnapshotService(t *testing.T, pool *pgxpool.Pool) (*postgres.Guard, *httptest.Server, *atomic.Int64) {
	t.Helper()
	guard := postgres.NewGuard(pool, nil)
	if err := guard.CreateSchema(ctxFor(t)); err != nil {
		t.Fatalf("CreateSchema: %v", err)
	}
	if _, err := pool.Exec(ctxFor(t), snapshotDDL); err != nil {
		t.Fatalf("create tables: %v", err)
	}
	var calls atomic.Int64
	h := fencehttp.FencedTx(guard.Do, func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) error {
		calls.Add(1)
		f, ok := fencehttp.FenceFromContext(r.Context())
		if !ok {
			return errors.New("no fence in the context")
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		id := r.PathValue("id")
		if _, err := tx.Exec(r.Context(), `INSERT INTO snapshots (id, data, token) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET data = excluded.data, token = excluded.token`, id, string(body), int64(f.Token)); err != nil {
			return err
		}
		if _, err := tx.Exec(r.Context(), `INSERT INTO write_log (id, token) VALUES ($1, $2)`, id, int64(f.Token)); err != nil {
			return err
		}
		switch string(body) {
		case "bad":
			http.Error(w, "bad snapshot", http.StatusBadRequest)
			return errors.New("bad snapshot")
		case "boom":
			return errors.New("boom")
		case "panic":
			panic("handler panic")
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "stored "+id)
		return nil
	}, &fencehttp.ResourceOptions{
		Resource: func(r *http.Request) string { return "snapshot/" + r.PathValue("id") },
		Logger:   nil,
	})
	mux := http.NewServeMux()
	mux.Handle("PUT /snapshots/{id}", h)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's stack
	srv.Start()
	t.Cleanup(srv.Close)
	return guard, srv, &calls
}

// snapshot returns the data and token of id, or "" and 0 if there is no row.
func snapshot(t *testing.T, pool *pgxpool.Pool, id string) (string, fence.Token) {
	t.Helper()
	var data string
	var tok int64
	err := pool.QueryRow(ctxFor(t), `SELECT data, token FROM snapshots WHERE id = $1`, id).Scan(&data, &tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0
	}
	if err != nil {
		t.Fatalf("read snapshot %q: %v", id, err)
	}
	return data, fence.Token(tok)
}

func TestFencedTx_Postgres(t *testing.T) {
	servertest.SkipIfShort(t)
	srv := servertest.Postgres(t)

	newPool := func(t *testing.T, maxConns int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(srv.CreateDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = maxConns
		pool, err := pgxpool.NewWithConfig(ctxFor(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}

	// putMain writes body to svc's snapshot "main" under f; mustStore also fails t
	// unless the write is stored (201).
	putMain := func(t *testing.T, svc *httptest.Server, f *fence.Fence, body string) resAnswer {
		t.Helper()
		return sendFenced(t, "PUT", svc.URL+"/snapshots/main", f, nil, body)
	}
	mustStore := func(t *testing.T, svc *httptest.Server, f *fence.Fence, body string) {
		t.Helper()
		if a := putMain(t, svc, f, body); a.status != http.StatusCreated {
			t.Fatalf("write %q with %v answered %d %v, want 201", body, f, a.status, a.err)
		}
	}

	t.Run("AcceptedCommitsWithTheFence", func(t *testing.T) {
		pool := newPool(t, 4)
		guard, svc, _ := pgSnapshotService(t, pool)
		a := putMain(t, svc, fenceOf("inventory", 4, "L4"), "apples=3")
		if a.status != http.StatusCreated || a.body != "stored main" {
			t.Fatalf("accepted write answered %d %q %v, want the handler's 201 \"stored main\"", a.status, a.body, a.err)
		}
		if data, tok := snapshot(t, pool, "main"); data != "apples=3" || tok != 4 {
			t.Fatalf("snapshot = %q (token %d), want \"apples=3\" (token 4)", data, tok)
		}
		hi, err := guard.Highest(ctxFor(t), "snapshot/main")
		if err != nil || hi != *fenceOf("inventory", 4, "L4") {
			t.Fatalf("guard's highest fence = %+v, %v; want the admitted fence", hi, err)
		}
	})

	t.Run("StaleRefusedHandlerNotRun", func(t *testing.T) {
		pool := newPool(t, 4)
		_, svc, calls := pgSnapshotService(t, pool)
		mustStore(t, svc, fenceOf("inventory", 8, "L8"), "second")
		a := putMain(t, svc, fenceOf("inventory", 7, "L7"), "first, paused")
		wantRefused(t, a, 409, "stale_token", map[string]any{"highest": 8, "token": 7, "key": "snapshot/main"})
		a = putMain(t, svc, fenceOf("inventory", 8, "other"), "same token")
		wantRefused(t, a, 409, "stale_token", map[string]any{"highest": 8, "same_token": true})
		a = putMain(t, svc, fenceOf("elsewhere", 99, "L99"), "other lock")
		wantRefused(t, a, 409, "wrong_lock", map[string]any{"lock": "inventory", "got": "elsewhere"})
		if n := calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1: refused fences must not run it", n)
		}
		if data, tok := snapshot(t, pool, "main"); data != "second" || tok != 8 {
			t.Fatalf("snapshot = %q (token %d), want \"second\" (token 8)", data, tok)
		}
		a = sendFenced(t, "PUT", svc.URL+"/snapshots/main", nil, http.Header{"Fence-Token": {"9"}}, "no lock")
		wantRefused(t, a, 400, "invalid", map[string]any{"field": "Fence-Lock"})
	})

	t.Run("HandlerRefusalRollsBackTheFence", func(t *testing.T) {
		pool := newPool(t, 4)
		guard, svc, _ := pgSnapshotService(t, pool)
		mustStore(t, svc, fenceOf("inventory", 2, "L2"), "good")
		a := putMain(t, svc, fenceOf("inventory", 3, "L3"), "bad")
		if a.status != 400 || !strings.Contains(a.body, "bad snapshot") {
			t.Fatalf("handler's refusal answered %d %q, want its own 400 \"bad snapshot\"", a.status, a.body)
		}
		a = putMain(t, svc, fenceOf("inventory", 4, "L4"), "boom")
		wantRefused(t, a, 500, "internal", nil)
		if data, tok := snapshot(t, pool, "main"); data != "good" || tok != 2 {
			t.Fatalf("snapshot = %q (token %d) after refused writes, want \"good\" (token 2)", data, tok)
		}
		// The fence rolled back with the writes: token 3 is still admissible.
		if hi, err := guard.Highest(ctxFor(t), "snapshot/main"); err != nil || hi.Token != 2 {
			t.Fatalf("guard's highest = %+v, %v; want token 2 (the refused transactions rolled back)", hi, err)
		}
		mustStore(t, svc, fenceOf("inventory", 3, "L3"), "good again")
	})

	t.Run("PanicRollsBackAndFreesTheConnection", func(t *testing.T) {
		pool := newPool(t, 1) // a leaked transaction would starve every later request
		guard, svc, _ := pgSnapshotService(t, pool)
		req, _ := http.NewRequestWithContext(ctxFor(t), "PUT", svc.URL+"/snapshots/main", strings.NewReader("panic"))
		fencehttp.SetHeaders(req, *fenceOf("inventory", 5, "L5"))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a panicking handler answered %d, want the connection closed", resp.StatusCode)
		}
		ctx, cancel := context.WithTimeout(ctxFor(t), 10*time.Second)
		defer cancel()
		if _, err := guard.Highest(ctx, "snapshot/main"); !errors.Is(err, fence.ErrNotFound) {
			t.Fatalf("guard's highest after the panic: %v, want ErrNotFound (rolled back, connection free)", err)
		}
		mustStore(t, svc, fenceOf("inventory", 5, "L5"), "after")
	})

	t.Run("ConcurrentWritersMonotonic", func(t *testing.T) {
		pool := newPool(t, 8)
		_, svc, _ := pgSnapshotService(t, pool)
		const writers = 30
		accepted := fencedtest.WriteAll(t, fencedtest.Shuffled(writers, 7), func(tok fence.Token) (bool, fence.Token, error) {
			return writeOutcome(putMain(t, svc, fenceOf("inventory", tok, "L"+tok.String()), "by "+tok.String()), 201)
		})
		rows, err := pool.Query(ctxFor(t), `SELECT token FROM write_log ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		var toks []fence.Token
		for _, tok := range committed {
			toks = append(toks, fence.Token(tok))
		}
		fencedtest.WantTokenOrder(t, toks, accepted, writers)
		if data, tok := snapshot(t, pool, "main"); tok != writers || data != "by 30" {
			t.Fatalf("snapshot = %q (token %d), want the highest writer's \"by 30\"", data, tok)
		}
	})
}
