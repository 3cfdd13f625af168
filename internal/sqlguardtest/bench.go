package sqlguardtest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlguard"
)

// Benchmarks runs the fenced-versus-plain benchmarks against s, each over a
// database from newDB (with the default fences table). The two pairs compare, in
// one run, a write with and without its fence:
// Tx_Plain/Tx_ResourceFenced: BEGIN; UPDATE data; COMMIT versus BEGIN; FenceTx;
// UPDATE data; COMMIT (the resource fence costs one statement).
// RowWrite_PlainUpdate/RowWrite_FencedUpdate: the same UPDATE versus Row.Update's
// conditional UPDATE (no extra statement). Interleaved_FencedVsPlain alternates
// them in every iteration and reports the ratios.
func Benchmarks[D sqlguard.Dialector](b *testing.B, s Backend[D], newDB func(b *testing.B) *sql.DB) {
	writes := func(b *testing.B) benchWrites { return s.benchWrites(b, newDB(b)) }
	b.Run("Tx_Plain", func(b *testing.B) { benchLoop(b, writes(b).plainTx) })
	b.Run("Tx_ResourceFenced", func(b *testing.B) { benchLoop(b, writes(b).fencedTx) })
	b.Run("RowWrite_PlainUpdate", func(b *testing.B) { benchLoop(b, writes(b).plainRow) })
	b.Run("RowWrite_FencedUpdate", func(b *testing.B) { benchLoop(b, writes(b).fencedRow) })
	b.Run("Interleaved_FencedVsPlain", func(b *testing.B) { s.benchInterleavedFencedVsPlain(b, newDB(b)) })
}

// benchLoop times write(i) for i = 0, 1, ... until b has enough.
func benchLoop(b *testing.B, write func(i int) error) {
	for i := 0; b.Loop(); i++ {
		if err := write(i); err != nil {
			b.Fatal(err)
		}
	}
}

// benchWrites are the four writes the benchmarks time, each writing value i.
type benchWrites struct {
	plainTx   func(i int) error // BEGIN; UPDATE data; COMMIT
	fencedTx  func(i int) error // BEGIN; FenceTx; UPDATE data; COMMIT
	plainRow  func(i int) error // UPDATE of the accounts row
	fencedRow func(i int) error // Row.Update of the same row
}

// benchWrites makes the tables of the benchmarks in d and returns their writes.
func (s *Backend[D]) benchWrites(b *testing.B, d *sql.DB) benchWrites {
	data, table, r := s.benchTables(b, d)
	g := s.NewGuard(d, "")
	ctx := context.Background()
	res := Resource(b)
	f := fence.Fence{Name: "bench", Token: 2, LeaseID: "l"}
	update := func(tx *sql.Tx, i int) error {
		_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
		return err
	}
	return benchWrites{
		plainTx: func(i int) error {
			return InTx(ctx, d, func(tx *sql.Tx) error { return update(tx, i) })
		},
		fencedTx: func(i int) error {
			return InTx(ctx, d, func(tx *sql.Tx) error {
				if err := g.FenceTx(ctx, tx, res, f); err != nil {
					return err
				}
				return update(tx, i)
			})
		},
		plainRow: func(i int) error {
			_, err := d.ExecContext(ctx, "UPDATE `"+table+"` SET balance = ? WHERE id = ?", i, 1)
			return err
		},
		fencedRow: func(i int) error { return r.Update(ctx, d, f, 1, i) },
	}
}

func (s *Backend[D]) benchTables(b *testing.B, d *sql.DB) (data, table string, r *sqlguard.Row[D]) {
	data = s.table(b, d, "CREATE TABLE %s (id INT PRIMARY KEY, v {INT} NOT NULL)")
	if _, err := d.Exec("INSERT INTO `" + data + "` VALUES (1, 0)"); err != nil {
		b.Fatal(err)
	}
	table, r = s.Accounts(b, d, "balance")
	if err := r.Upsert(context.Background(), d, FenceOf("bench", 1, "l"), 1, 0); err != nil {
		b.Fatal(err)
	}
	return data, table, r
}

// benchInterleavedFencedVsPlain alternates the plain and the fenced variant in
// every iteration and reports each one's mean time and their ratio, so that load
// from other processes hits both alike (the separate benchmarks above drift on a
// shared machine). tx-ratio compares the transactions (FenceTx adds one
// statement); row-ratio compares Row.Update with the plain UPDATE.
func (s *Backend[D]) benchInterleavedFencedVsPlain(b *testing.B, d *sql.DB) {
	w := s.benchWrites(b, d)
	var plainTx, fencedTx, plainRow, fencedRow time.Duration
	timed := func(total *time.Duration, write func(int) error, i int) {
		start := time.Now()
		if err := write(i); err != nil {
			b.Fatal(err)
		}
		*total += time.Since(start)
	}
	for i := 0; b.Loop(); i++ {
		timed(&plainTx, w.plainTx, i)
		timed(&fencedTx, w.fencedTx, i)
		timed(&plainRow, w.plainRow, i)
		timed(&fencedRow, w.fencedRow, i)
	}
	n := float64(b.N)
	b.ReportMetric(float64(plainTx.Nanoseconds())/n, "plain-tx-ns")
	b.ReportMetric(float64(fencedTx.Nanoseconds())/n, "fenced-tx-ns")
	b.ReportMetric(float64(fencedTx)/float64(plainTx), "tx-ratio")
	b.ReportMetric(float64(plainRow.Nanoseconds())/n, "plain-row-ns")
	b.ReportMetric(float64(fencedRow.Nanoseconds())/n, "fenced-row-ns")
	b.ReportMetric(float64(fencedRow)/float64(plainRow), "row-ratio")
}
