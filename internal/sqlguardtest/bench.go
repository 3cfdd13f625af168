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
	b.Run("Tx_Plain", func(b *testing.B) { s.benchTxPlain(b, newDB(b)) })
	b.Run("Tx_ResourceFenced", func(b *testing.B) { s.benchTxResourceFenced(b, newDB(b)) })
	b.Run("RowWrite_PlainUpdate", func(b *testing.B) { s.benchRowWritePlainUpdate(b, newDB(b)) })
	b.Run("RowWrite_FencedUpdate", func(b *testing.B) { s.benchRowWriteFencedUpdate(b, newDB(b)) })
	b.Run("Interleaved_FencedVsPlain", func(b *testing.B) { s.benchInterleavedFencedVsPlain(b, newDB(b)) })
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

func (s *Backend[D]) benchTxPlain(b *testing.B, d *sql.DB) {
	data, _, _ := s.benchTables(b, d)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		err := InTx(ctx, d, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func (s *Backend[D]) benchTxResourceFenced(b *testing.B, d *sql.DB) {
	data, _, _ := s.benchTables(b, d)
	g := s.NewGuard(d, "")
	ctx := context.Background()
	r := Resource(b)
	f := FenceOf("bench", 1, "lease")
	for i := 0; b.Loop(); i++ {
		err := InTx(ctx, d, func(tx *sql.Tx) error {
			if err := g.FenceTx(ctx, tx, r, f); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func (s *Backend[D]) benchRowWritePlainUpdate(b *testing.B, d *sql.DB) {
	_, table, _ := s.benchTables(b, d)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := d.ExecContext(ctx, "UPDATE `"+table+"` SET balance = ? WHERE id = ?", i, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func (s *Backend[D]) benchRowWriteFencedUpdate(b *testing.B, d *sql.DB) {
	_, _, r := s.benchTables(b, d)
	ctx := context.Background()
	f := fence.Fence{Name: "bench", Token: 2, LeaseID: "l"}
	for i := 0; b.Loop(); i++ {
		if err := r.Update(ctx, d, f, 1, i); err != nil {
			b.Fatal(err)
		}
	}
}

// benchInterleavedFencedVsPlain alternates the plain and the fenced variant in
// every iteration and reports each one's mean time and their ratio, so that load
// from other processes hits both alike (the separate benchmarks above drift on a
// shared machine). tx-ratio compares the transactions (FenceTx adds one
// statement); row-ratio compares Row.Update with the plain UPDATE.
func (s *Backend[D]) benchInterleavedFencedVsPlain(b *testing.B, d *sql.DB) {
	data, table, r := s.benchTables(b, d)
	g := s.NewGuard(d, "")
	ctx := context.Background()
	res := Resource(b)
	f := fence.Fence{Name: "bench", Token: 2, LeaseID: "l"}
	var plainTx, fencedTx, plainRow, fencedRow time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if err := InTx(ctx, d, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := InTx(ctx, d, func(tx *sql.Tx) error {
			if err := g.FenceTx(ctx, tx, res, f); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := d.ExecContext(ctx, "UPDATE `"+table+"` SET balance = ? WHERE id = ?", i, 1); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if err := r.Update(ctx, d, f, 1, i); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		plainTx += t1.Sub(t0)
		fencedTx += t2.Sub(t1)
		plainRow += t3.Sub(t2)
		fencedRow += t4.Sub(t3)
	}
	n := float64(b.N)
	b.ReportMetric(float64(plainTx.Nanoseconds())/n, "plain-tx-ns")
	b.ReportMetric(float64(fencedTx.Nanoseconds())/n, "fenced-tx-ns")
	b.ReportMetric(float64(fencedTx)/float64(plainTx), "tx-ratio")
	b.ReportMetric(float64(plainRow.Nanoseconds())/n, "plain-row-ns")
	b.ReportMetric(float64(fencedRow.Nanoseconds())/n, "fenced-row-ns")
	b.ReportMetric(float64(fencedRow)/float64(plainRow), "row-ratio")
}
