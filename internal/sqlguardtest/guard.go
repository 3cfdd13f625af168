package sqlguardtest

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// GuardTests runs the resource-fence tests against b, one subtest each.
func GuardTests[D sqlguard.Dialector](t *testing.T, b Backend[D]) {
	t.Run("Fence_HigherAcceptedLowerRejectedWithHighest", b.guardHigherAccepted)
	t.Run("Fence_SameLeaseAgainAccepted_EqualTokenOtherLeaseRejected", b.guardSameLease)
	t.Run("Fence_EmptyLease_EqualTokenRejected", b.guardEmptyLease)
	t.Run("Fence_OtherNamespaceRejected", b.guardOtherNamespace)
	t.Run("Highest_NeverFenced_NotFound", b.guardNeverFenced)
	t.Run("FenceTx_StaleRollsBackCallerWrites", b.guardStaleRollsBack)
	t.Run("BadInput_InvalidAndNothingWritten", b.guardBadInput)
	t.Run("Do_CommitsOnSuccess_RollsBackOnStaleOrWriteError", b.guardDo)
	t.Run("FenceTx_LockSerialisesWriters", b.guardSerialisesWriters)
	t.Run("MissingTable_ErrSchema", b.guardMissingTable)
	t.Run("WrongSchema_MissingLeaseColumn_ErrSchema", b.guardMissingLeaseColumn)
	t.Run("ClosedDB_ErrClosed", b.guardClosedDB)
	t.Run("Schema_MatchesGuardDDL", b.guardSchemaDDL)
}

// The database's lock serialises writers: a second FenceTx on the same resource
// waits for the first transaction (MariaDB's row lock; SQLite's BEGIN IMMEDIATE),
// then sees its fence.
func (b *Backend[D]) guardSerialisesWriters(t *testing.T) {
	d := b.DB(t)
	g := b.NewGuard(d, "")
	ctx := context.Background()
	r := Resource(t)
	tx1, err := d.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.FenceTx(ctx, tx1, r, FenceOf("lock", 5, "a")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		tx2, err := d.BeginTx(ctx, nil)
		if err != nil {
			done <- err
			return
		}
		defer tx2.Rollback()
		done <- g.FenceTx(ctx, tx2, r, FenceOf("lock", 4, "b"))
	}()
	<-started
	select {
	case err := <-done:
		t.Fatalf("second writer did not wait for the first transaction: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	WantStale(t, <-done, 5, false)
}

func (b *Backend[D]) guardMissingTable(t *testing.T) {
	g := b.NewGuard(b.DB(t), "no_such_fences")
	if err := g.Fence(context.Background(), Resource(t), FenceOf("lock", 1, "a")); !errors.Is(err, sqlguard.ErrSchema) {
		t.Fatalf("want sqlguard.ErrSchema, got %v", err)
	}
}

func (b *Backend[D]) guardMissingLeaseColumn(t *testing.T) {
	d := b.DB(t)
	table := b.table(t, d, "CREATE TABLE %s (resource {NAME} PRIMARY KEY, name {NAME} NOT NULL, token {INT} NOT NULL)")
	g := b.NewGuard(d, table)
	if err := g.Fence(context.Background(), Resource(t), FenceOf("lock", 1, "a")); !errors.Is(err, sqlguard.ErrSchema) {
		t.Fatalf("want sqlguard.ErrSchema, got %v", err)
	}
	if err := g.Check(context.Background()); !errors.Is(err, sqlguard.ErrSchema) {
		t.Fatalf("Check: want sqlguard.ErrSchema, got %v", err)
	}
}

func (b *Backend[D]) guardClosedDB(t *testing.T) {
	d := b.Open(t)
	d.Close()
	err := b.NewGuard(d, "").Fence(context.Background(), Resource(t), FenceOf("lock", 1, "a"))
	if !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("want fence.ErrClosed, got %v", err)
	}
}

func (b *Backend[D]) guardSchemaDDL(t *testing.T) {
	if got := b.NewGuard(&sql.DB{}, "").SchemaSQL(); got != b.Schema {
		t.Fatalf("default guard DDL differs from Schema:\nwant %s\ngot  %s", b.Schema, got)
	}
}

// fenceStep is one Guard.Fence of a sequence and its outcome: accepted, or (stale)
// refused with a *fence.StaleTokenError carrying highest and same.
type fenceStep struct {
	what    string
	f       fence.Fence
	stale   bool
	highest fence.Token
	same    bool
}

// fenceSteps runs steps in order on a fresh resource of g's, failing t at the first
// outcome that differs, and returns the resource.
func fenceSteps[D sqlguard.Dialector](t *testing.T, g *sqlguard.Guard[D], steps []fenceStep) string {
	t.Helper()
	r := Resource(t)
	for _, s := range steps {
		err := g.Fence(context.Background(), r, s.f)
		if s.stale {
			WantStale(t, err, s.highest, s.same)
		} else if err != nil {
			t.Fatalf("%s: want nil, got %v", s.what, err)
		}
	}
	return r
}

func (b *Backend[D]) guardHigherAccepted(t *testing.T) {
	g := b.NewGuard(b.DB(t), "")
	r := fenceSteps(t, g, []fenceStep{
		{what: "first fence", f: FenceOf("lock", 5, "a")},
		{what: "lower fence", f: FenceOf("lock", 4, "b"), stale: true, highest: 5},
		{what: "higher fence", f: FenceOf("lock", 9, "c")},
	})
	got, err := g.Highest(context.Background(), r)
	if err != nil || got != FenceOf("lock", 9, "c") {
		t.Fatalf("Highest: want lock#9 lease c, got %+v, %v", got, err)
	}
}

func (b *Backend[D]) guardSameLease(t *testing.T) {
	again := fenceStep{what: "write under one lease", f: FenceOf("lock", 7, "lease-a")}
	fenceSteps(t, b.NewGuard(b.DB(t), ""), []fenceStep{
		again, again, again,
		{what: "equal token, other lease", f: FenceOf("lock", 7, "lease-b"), stale: true, highest: 7, same: true},
		{what: "equal token, no lease", f: FenceOf("lock", 7, ""), stale: true, highest: 7, same: true},
	})
}

func (b *Backend[D]) guardEmptyLease(t *testing.T) {
	fenceSteps(t, b.NewGuard(b.DB(t), ""), []fenceStep{
		{what: "first fence without lease", f: FenceOf("lock", 3, "")},
		{what: "equal token without lease", f: FenceOf("lock", 3, ""), stale: true, highest: 3, same: true},
		{what: "higher fence without lease", f: FenceOf("lock", 4, "")},
	})
}

func (b *Backend[D]) guardOtherNamespace(t *testing.T) {
	g := b.NewGuard(b.DB(t), "")
	ctx := context.Background()
	r := Resource(t)
	if err := g.Fence(ctx, r, FenceOf("payments", 2, "a")); err != nil {
		t.Fatal(err)
	}
	err := g.Fence(ctx, r, FenceOf("reports", 100, "b"))
	var ns *fence.NamespaceError
	if !errors.As(err, &ns) || ns.Want != "payments" || ns.Got != "reports" {
		t.Fatalf("want NamespaceError want=payments got=reports, got %v", err)
	}
	if got, _ := g.Highest(ctx, r); got.Token != 2 || got.Name != "payments" {
		t.Fatalf("fence after a refused namespace: want payments#2, got %v", got)
	}
}

func (b *Backend[D]) guardNeverFenced(t *testing.T) {
	_, err := b.NewGuard(b.DB(t), "").Highest(context.Background(), Resource(t))
	if !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("want fence.ErrNotFound, got %v", err)
	}
}

// A stale FenceTx rolls back the whole transaction: the caller's other writes in it
// are not applied.
func (b *Backend[D]) guardStaleRollsBack(t *testing.T) {
	d := b.DB(t)
	g, data, r := b.guardWithData(t, d)
	ctx := context.Background()
	write := func(f fence.Fence, id int, v string) error {
		return InTx(ctx, d, func(tx *sql.Tx) error {
			if err := g.FenceTx(ctx, tx, r, f); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO `"+data+"` (id, v) VALUES (?, ?)"+b.Upsert("id", "v"), id, v)
			return err
		})
	}
	if err := write(FenceOf("lock", 10, "new"), 1, "new holder"); err != nil {
		t.Fatal(err)
	}
	// The zombie tries to overwrite row 1 and insert row 2: a row fence alone could
	// not stop the insert, the resource fence does.
	WantStale(t, write(FenceOf("lock", 9, "zombie"), 1, "zombie"), 10, false)
	WantStale(t, write(FenceOf("lock", 9, "zombie"), 2, "zombie"), 10, false)

	var n int
	var v string
	if err := d.QueryRow("SELECT COUNT(*), MAX(v) FROM `"+data+"`").Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != 1 || v != "new holder" {
		t.Fatalf("want 1 row %q, got %d rows, max %q", "new holder", n, v)
	}
}

func (b *Backend[D]) guardBadInput(t *testing.T) {
	var nilQ sqlguard.Querier
	g := b.NewGuard(b.DB(t), "")
	ctx := context.Background()
	r := Resource(t)
	cases := []struct {
		name     string
		resource string
		f        fence.Fence
	}{
		{"token 0", r, FenceOf("lock", 0, "a")},
		{"token above 2^53", r, FenceOf("lock", fence.MaxToken+1, "a")},
		{"token above bigint", r, FenceOf("lock", 1<<63, "a")},
		{"empty resource", "", FenceOf("lock", 1, "a")},
		{"empty lock name", r, FenceOf("", 1, "a")},
		{"lease with spaces", r, FenceOf("lock", 1, "a b")},
	}
	for _, c := range cases {
		if err := g.Fence(ctx, c.resource, c.f); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: want fence.ErrInvalid, got %v", c.name, err)
		}
	}
	if err := g.FenceTx(ctx, nilQ, r, FenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil tx: want fence.ErrInvalid, got %v", err)
	}
	if _, err := g.Highest(ctx, r); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("after only bad input: want no fence (ErrNotFound), got %v", err)
	}
	bad := b.NewGuard(b.DB(t), "x`; DROP TABLE y; --")
	if err := bad.Fence(ctx, r, FenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("bad table name: want fence.ErrInvalid, got %v", err)
	}
	if err := b.NewGuard(nil, "").Fence(ctx, r, FenceOf("lock", 1, "a")); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil db: want fence.ErrInvalid, got %v", err)
	}
}

func (b *Backend[D]) guardDo(t *testing.T) {
	d := b.DB(t)
	g, data, r := b.guardWithData(t, d)
	ctx := context.Background()
	insert := func(id int, v string) func(tx *sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO `"+data+"` (id, v) VALUES (?, ?)", id, v)
			return err
		}
	}
	if err := g.Do(ctx, r, FenceOf("lock", 2, "a"), insert(1, "ok")); err != nil {
		t.Fatalf("Do: want nil, got %v", err)
	}
	WantStale(t, g.Do(ctx, r, FenceOf("lock", 1, "z"), insert(2, "zombie")), 2, false)
	boom := errors.New("boom")
	err := g.Do(ctx, r, FenceOf("lock", 3, "b"), func(tx *sql.Tx) error {
		if err := insert(3, "half")(tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("failed write: want its error, got %v", err)
	}
	if err := g.Do(ctx, r, FenceOf("lock", 3, "b"), nil); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("nil write: want fence.ErrInvalid, got %v", err)
	}
	var n int
	if err := d.QueryRow("SELECT COUNT(*) FROM `" + data + "`").Scan(&n); err != nil || n != 1 {
		t.Fatalf("want only the first row (1), got %d rows (%v)", n, err)
	}
	// The failed write's fence rolled back with it.
	if got, err := g.Highest(ctx, r); err != nil || got.Token != 2 {
		t.Fatalf("want the fence of the last committed Do (2), got %v, %v", got, err)
	}
}

// guardWithData returns a Guard over d's default fences table, the name of a fresh
// plain table (id, v) for the writes a test fences with it, and a fresh resource.
func (b *Backend[D]) guardWithData(t *testing.T, d *sql.DB) (g *sqlguard.Guard[D], data, resource string) {
	t.Helper()
	data = UniqueTable(t, d, "CREATE TABLE %s (id INT PRIMARY KEY, v TEXT NOT NULL)")
	return b.NewGuard(d, ""), data, Resource(t)
}
