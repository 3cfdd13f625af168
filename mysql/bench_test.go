package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/mysql"
)

// The two pairs compare, in one run, a write with and without its fence:
//
//	go test -run '^$' -bench . -benchtime 2000x ./mysql/
//
// PlainTx/FencedTx: BEGIN; UPDATE data; COMMIT versus BEGIN; FenceTx; UPDATE data;
// COMMIT (the resource fence costs one statement). PlainUpdate/RowUpdate: the same
// UPDATE versus Row.Update's conditional UPDATE (no extra statement).

func benchTables(b *testing.B) (data string, r *mysql.Row) {
	data = uniqueTable(b, "CREATE TABLE %s (id INT PRIMARY KEY, v BIGINT NOT NULL)")
	if _, err := testDB.Exec("INSERT INTO `" + data + "` VALUES (1, 0)"); err != nil {
		b.Fatal(err)
	}
	r = &mysql.Row{Table: uniqueTable(b, accountsDDL), Key: "id", Columns: []string{"balance"}}
	if err := r.Upsert(context.Background(), testDB, fenceOf("bench", 1, "l"), 1, 0); err != nil {
		b.Fatal(err)
	}
	return data, r
}

func BenchmarkTx_Plain(b *testing.B) {
	d := db(b)
	data, _ := benchTables(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		err := inTx(ctx, d, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTx_ResourceFenced(b *testing.B) {
	d := db(b)
	data, _ := benchTables(b)
	g := mysql.NewGuard(d, nil)
	ctx := context.Background()
	r := resource(b)
	f := fenceOf("bench", 1, "lease")
	for i := 0; b.Loop(); i++ {
		err := inTx(ctx, d, func(tx *sql.Tx) error {
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

func BenchmarkRowWrite_PlainUpdate(b *testing.B) {
	d := db(b)
	_, r := benchTables(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if _, err := d.ExecContext(ctx, "UPDATE `"+r.Table+"` SET balance = ? WHERE id = ?", i, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRowWrite_FencedUpdate(b *testing.B) {
	d := db(b)
	_, r := benchTables(b)
	ctx := context.Background()
	f := fence.Fence{Name: "bench", Token: 2, LeaseID: "l"}
	for i := 0; b.Loop(); i++ {
		if err := r.Update(ctx, d, f, 1, i); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInterleaved_FencedVsPlain alternates the plain and the fenced variant in
// every iteration and reports each one's mean time and their ratio, so that load
// from other processes hits both alike (the separate benchmarks above drift on a
// shared machine). tx-ratio compares the transactions (FenceTx adds one
// statement); row-ratio compares Row.Update with the plain UPDATE.
func BenchmarkInterleaved_FencedVsPlain(b *testing.B) {
	d := db(b)
	data, r := benchTables(b)
	g := mysql.NewGuard(d, nil)
	ctx := context.Background()
	res := resource(b)
	f := fence.Fence{Name: "bench", Token: 2, LeaseID: "l"}
	var plainTx, fencedTx, plainRow, fencedRow time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if err := inTx(ctx, d, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := inTx(ctx, d, func(tx *sql.Tx) error {
			if err := g.FenceTx(ctx, tx, res, f); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE `"+data+"` SET v = ? WHERE id = 1", i)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := d.ExecContext(ctx, "UPDATE `"+r.Table+"` SET balance = ? WHERE id = ?", i, 1); err != nil {
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
