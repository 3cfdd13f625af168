package mysql_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/mysql"
)

// A holder fences its transaction with the resource fence; a paused predecessor
// with a lower token is refused and rolls back, and learns the highest token.
func ExampleGuard_FenceTx() {
	ctx := context.Background()
	db := testDB // a *sql.DB from mysql.Open(dsn)
	g := mysql.NewGuard(db, nil)
	if err := g.CreateSchema(ctx); err != nil {
		fmt.Println(err)
		return
	}
	transfer := func(f fence.Fence) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // the one line that undoes a refused transaction
		if err := g.FenceTx(ctx, tx, "ledger/example", f); err != nil {
			return err
		}
		// ... the transaction's own writes go here ...
		return tx.Commit()
	}
	fmt.Println(transfer(fence.Fence{Name: "ledger", Token: 34, LeaseID: "new-holder"}))
	err := transfer(fence.Fence{Name: "ledger", Token: 33, LeaseID: "paused-holder"})
	var st *fence.StaleTokenError
	fmt.Println(errors.As(err, &st), st.Highest)
	// Output:
	// <nil>
	// true 34
}
