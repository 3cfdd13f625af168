package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

var accounts = &postgres.Row{Table: "accounts", Key: "id", Columns: []string{"balance"}}

// balance reads an account's balance and fence token.
func balance(t testing.TB, pool *pgxpool.Pool, id string) (bal, tok int64) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT balance, fence_token FROM accounts WHERE id = $1`, id).Scan(&bal, &tok)
	wantOK(t, "read account "+id, err)
	return bal, tok
}

// wantBalance fails t unless account id has balance bal and fence token tok; what
// says when.
func wantBalance(t testing.TB, what, id string, bal, tok int64) {
	t.Helper()
	if gotBal, gotTok := balance(t, sharedPool, id); gotBal != bal || gotTok != tok {
		t.Fatalf("%s: balance %d token %d, want %d and %d", what, gotBal, gotTok, bal, tok)
	}
}

func TestRow_Update_AdmitsHigherRejectsStaleTellsMissingApart(t *testing.T) {
	ctx := ctxT(t)
	id, lock := uniq(t, "acct"), uniq(t, "lock")
	_, err := sharedPool.Exec(ctx, `INSERT INTO accounts (id, balance) VALUES ($1, 100)`, id)
	wantOK(t, "insert a never-fenced account", err)

	wantOK(t, "Update of a never-fenced row", accounts.Update(ctx, sharedPool, fenceOf(lock, 3), id, 110))
	wantOK(t, "Update again under the same lease", accounts.Update(ctx, sharedPool, fenceOf(lock, 3), id, 120))
	wantOK(t, "Update with a higher token", accounts.Update(ctx, sharedPool, fenceOf(lock, 9), id, 130))
	err = accounts.Update(ctx, sharedPool, fenceOf(lock, 4), id, 999)
	wantStale(t, "Update with a lower token", err, 9)
	wantBalance(t, "after the stale update", id, 130, 9)
	err = accounts.Update(ctx, sharedPool, fenceOf(lock, 9), uniq(t, "missing"), 1)
	wantIs(t, "Update of a missing row", err, fence.ErrNotFound)
	if errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Update of a missing row: %v also matches ErrStaleToken", err)
	}
	var ne *fence.NamespaceError
	if err := accounts.Update(ctx, sharedPool, fenceOf(uniq(t, "other"), 50), id, 1); !errors.As(err, &ne) {
		t.Fatalf("Update with another lock's token: error = %v, want *fence.NamespaceError", err)
	}
	h, err := accounts.Highest(ctx, sharedPool, id)
	wantOK(t, "Highest", err)
	if h != fenceOf(lock, 9) {
		t.Fatalf("Highest = %+v, want %+v", h, fenceOf(lock, 9))
	}
}

func TestRow_Upsert_InsertsThenRejectsStale(t *testing.T) {
	ctx := ctxT(t)
	id, lock := uniq(t, "acct"), uniq(t, "lock")
	wantOK(t, "Upsert of a new row", accounts.Upsert(ctx, sharedPool, fenceOf(lock, 2), id, 10))
	wantOK(t, "Upsert with a higher token", accounts.Upsert(ctx, sharedPool, fenceOf(lock, 5), id, 20))
	err := accounts.Upsert(ctx, sharedPool, fenceOf(lock, 2), id, 30)
	wantStale(t, "Upsert with a lower token", err, 5)
	err = accounts.Upsert(ctx, sharedPool, fence.Fence{Name: lock, Token: 5, LeaseID: "other"}, id, 40)
	wantStale(t, "Upsert with the same token, other lease", err, 5)
	wantBalance(t, "after the stale upserts", id, 20, 5)
}

func TestRow_Fence_AdvancesWithoutTouchingValues(t *testing.T) {
	ctx := ctxT(t)
	id, lock := uniq(t, "acct"), uniq(t, "lock")
	wantOK(t, "Upsert", accounts.Upsert(ctx, sharedPool, fenceOf(lock, 1), id, 77))
	wantOK(t, "Fence", accounts.Fence(ctx, sharedPool, fenceOf(lock, 2), id))
	wantBalance(t, "after Fence", id, 77, 2)
	wantStale(t, "zombie Update after Fence", accounts.Update(ctx, sharedPool, fenceOf(lock, 1), id, 0), 2)
	fresh := uniq(t, "acct")
	wantOK(t, "Fence of a missing row inserts it", accounts.Fence(ctx, sharedPool, fenceOf(lock, 3), fresh))
	wantBalance(t, "fenced-only row", fresh, 0, 3)
}

func TestRow_BadInput_ClearErrors(t *testing.T) {
	ctx := ctxT(t)
	id, lock := uniq(t, "acct"), uniq(t, "lock")
	wantOK(t, "Upsert", accounts.Upsert(ctx, sharedPool, fenceOf(lock, 1), id, 1))
	wantIs(t, "token 0", accounts.Update(ctx, sharedPool, fence.Fence{Name: lock, Token: 0}, id, 2), fence.ErrInvalid)
	wantIs(t, "token 2^63", accounts.Upsert(ctx, sharedPool, fence.Fence{Name: lock, Token: 1 << 63}, id, 2), fence.ErrInvalid)
	wantIs(t, "two values for one column", accounts.Update(ctx, sharedPool, fenceOf(lock, 2), id, 2, 3), fence.ErrInvalid)
	wantIs(t, "no value", accounts.Upsert(ctx, sharedPool, fenceOf(lock, 2), id), fence.ErrInvalid)
	wantIs(t, "nil key", accounts.Upsert(ctx, sharedPool, fenceOf(lock, 2), nil, 1), fence.ErrInvalid)
	wantIs(t, "nil querier", accounts.Upsert(ctx, nil, fenceOf(lock, 2), id, 1), fence.ErrInvalid)
	wantIs(t, "a value of the wrong type", accounts.Update(ctx, sharedPool, fenceOf(lock, 2), id, "lots"), fence.ErrInvalid)
	wantBalance(t, "after bad input", id, 1, 1)
	for _, r := range []*postgres.Row{
		{Table: "accounts; --", Key: "id", Columns: []string{"balance"}},
		{Table: "accounts", Key: `id"`, Columns: []string{"balance"}},
		{Table: "accounts", Key: "id", Columns: []string{"balance", "balance"}},
		{Table: "accounts", Key: "id", Columns: []string{"fence_token"}},
		{Table: "accounts", Key: "id", Columns: []string{"balance"}, FenceToken: "id"},
	} {
		wantIs(t, "malformed Row "+r.Table+"/"+r.Key, r.Upsert(ctx, sharedPool, fenceOf(lock, 2), id, 1), fence.ErrInvalid)
	}
}

func TestRow_NullFenceAndWrongSchema_ClearErrorsNothingWritten(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	_, err := pool.Exec(ctx, `CREATE TABLE loose (id int PRIMARY KEY, v text, fence_name text, fence_token bigint, fence_lease text)`)
	wantOK(t, "create a table with nullable fence columns", err)
	_, err = pool.Exec(ctx, `INSERT INTO loose VALUES (1, 'old', 'lock', NULL, 'l')`)
	wantOK(t, "insert a NULL fence", err)
	loose := &postgres.Row{Table: "loose", Key: "id", Columns: []string{"v"}}
	wantIs(t, "Update of a row with a NULL fence", loose.Update(ctx, pool, fenceOf("lock", 5), 1, "new"), postgres.ErrCorrupt)
	wantIs(t, "Upsert of a row with a NULL fence", loose.Upsert(ctx, pool, fenceOf("lock", 5), 1, "new"), postgres.ErrCorrupt)
	var v string
	wantOK(t, "read back", pool.QueryRow(ctx, `SELECT v FROM loose WHERE id = 1`).Scan(&v))
	if v != "old" {
		t.Fatalf("value = %q, want %q (nothing written)", v, "old")
	}

	noFence := &postgres.Row{Table: "loose", Key: "id", Columns: []string{"v"}, FenceToken: "no_such_column"}
	wantIs(t, "Update naming a missing column", noFence.Update(ctx, pool, fenceOf("lock", 5), 1, "new"), postgres.ErrSchema)
	missing := &postgres.Row{Table: "no_such_table", Key: "id", Columns: []string{"v"}}
	wantIs(t, "Upsert into a missing table", missing.Upsert(ctx, pool, fenceOf("lock", 5), 1, "new"), postgres.ErrSchema)
}

func TestRow_FenceColumnsDDL_CreatesAWorkingTable(t *testing.T) {
	ctx := ctxT(t)
	pool := freshDB(t)
	r := &postgres.Row{Table: "orders", Key: "order_id", Columns: []string{"state"}, FenceName: "fn", FenceToken: "ft", FenceLease: "fl"}
	cols, err := r.FenceColumnsDDL()
	wantOK(t, "FenceColumnsDDL", err)
	_, err = pool.Exec(ctx, `CREATE TABLE orders (order_id bigint PRIMARY KEY, state text NOT NULL DEFAULT 'new', `+cols+`)`)
	wantOK(t, "create table with the generated columns", err)
	wantOK(t, "Upsert", r.Upsert(ctx, pool, fenceOf("orders-lock", 2), int64(42), "paid"))
	wantStale(t, "stale Upsert", r.Upsert(ctx, pool, fenceOf("orders-lock", 1), int64(42), "refunded"), 2)
	var state string
	wantOK(t, "read back", pool.QueryRow(ctx, `SELECT state FROM orders WHERE order_id = 42`).Scan(&state))
	if state != "paid" {
		t.Fatalf("state = %q, want %q", state, "paid")
	}
}

func TestKV_PutGetFence(t *testing.T) {
	ctx := ctxT(t)
	kv := postgres.NewKV(sharedPool, nil)
	key, lock := uniq(t, "key"), uniq(t, "lock")
	_, err := kv.Get(ctx, key)
	wantIs(t, "Get of a key never written", err, fence.ErrNotFound)
	wantOK(t, "Put", kv.Put(ctx, key, []byte("v1"), fenceOf(lock, 1)))
	wantOK(t, "Fence", kv.Fence(ctx, key, fenceOf(lock, 2)))
	it, err := kv.Get(ctx, key)
	wantOK(t, "Get", err)
	if string(it.Value) != "v1" || it.Fence != fenceOf(lock, 2) {
		t.Fatalf("Get = %q %+v, want %q %+v", it.Value, it.Fence, "v1", fenceOf(lock, 2))
	}
	wantStale(t, "stale Put", kv.Put(ctx, key, []byte("zombie"), fenceOf(lock, 1)), 2)
	onlyFenced := uniq(t, "key")
	wantOK(t, "Fence of a new key", kv.Fence(ctx, onlyFenced, fenceOf(lock, 1)))
	it, err = kv.Get(ctx, onlyFenced)
	wantOK(t, "Get of a fenced-only key", err)
	if it.Value != nil {
		t.Fatalf("fenced-only key: value = %q, want nil", it.Value)
	}
	empty := uniq(t, "key")
	wantOK(t, "Put of an empty value", kv.Put(ctx, empty, nil, fenceOf(lock, 1)))
	it, err = kv.Get(ctx, empty)
	wantOK(t, "Get of an empty value", err)
	if it.Value == nil || len(it.Value) != 0 {
		t.Fatalf("empty value: got %#v, want a non-nil empty slice", it.Value)
	}
	wantIs(t, "Put of a value over MaxValueLen", kv.Put(ctx, key, make([]byte, postgres.MaxValueLen+1), fenceOf(lock, 3)), fence.ErrInvalid)
}
