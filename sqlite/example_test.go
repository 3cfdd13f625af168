package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/sqlite"
)

// A holder fences its transaction with the resource fence; a paused predecessor
// with a lower token is refused, its transaction rolls back, and it learns the
// highest token.
func ExampleGuard_FenceTx() {
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	g := sqlite.NewGuard(db, nil)
	if err := g.CreateSchema(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.Exec("CREATE TABLE ledger (id INTEGER PRIMARY KEY, entry TEXT NOT NULL)"); err != nil {
		fmt.Println(err)
		return
	}
	post := func(f fence.Fence, entry string) error {
		tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE with sqlite.Open
		if err != nil {
			return err
		}
		defer tx.Rollback() // the one line that undoes a refused transaction
		if err := g.FenceTx(ctx, tx, "ledger", f); err != nil {
			return err
		}
		if _, err := tx.Exec("INSERT INTO ledger (entry) VALUES (?)", entry); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println(post(fence.Fence{Name: "ledger", Token: 34, LeaseID: "new-holder"}, "payout 1"))
	err = post(fence.Fence{Name: "ledger", Token: 33, LeaseID: "paused-holder"}, "payout 1 again")
	var st *fence.StaleTokenError
	fmt.Println(errors.As(err, &st), st.Highest)
	var n int
	_ = db.QueryRow("SELECT COUNT(*) FROM ledger").Scan(&n)
	fmt.Println("entries:", n)
	// Output:
	// <nil>
	// true 34
	// entries: 1
}

// A table with fence columns: Upsert writes a row only if its stored fence admits
// the new one.
func ExampleRow_Upsert() {
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "app.db"))
	defer db.Close()
	_, _ = db.Exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
		fence_name TEXT NOT NULL, fence_token INTEGER NOT NULL CHECK (fence_token > 0), fence_lease TEXT NOT NULL)`)
	accounts := &sqlite.Row{Table: "accounts", Key: "id", Columns: []string{"balance"}}
	ctx := context.Background()
	fmt.Println(accounts.Upsert(ctx, db, fence.Fence{Name: "acct-7", Token: 5, LeaseID: "b"}, 7, 100))
	fmt.Println(accounts.Upsert(ctx, db, fence.Fence{Name: "acct-7", Token: 4, LeaseID: "a"}, 7, 999))
	var balance int
	_ = db.QueryRow("SELECT balance FROM accounts WHERE id = 7").Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// <nil>
	// sqlite: upsert accounts key 7: fence: stale token 4 for "7", highest seen 5
	// balance: 100
}
