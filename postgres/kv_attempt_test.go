package postgres_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/postgres"
)

// A KV table made by an earlier version's DDL has no fence_attempts column:
// CreateSchema adds it, the rows keep their values and fences, and a write named
// by an attempt id is then applied once (P3).
func TestKV_CreateSchema_UpgradesTableWithoutAttempts(t *testing.T) {
	ctx := ctxT(t)
	table := "fence_kv_v1_" + driver.NewLeaseID()[:8]
	_, err := sharedPool.Exec(ctx, `CREATE TABLE `+table+` (
    key         text PRIMARY KEY,
    value       bytea,
    fence_name  text   NOT NULL DEFAULT '',
    fence_token bigint NOT NULL DEFAULT 0 CHECK (fence_token >= 0),
    fence_lease text   NOT NULL DEFAULT ''
)`)
	wantOK(t, "CREATE TABLE (the earlier DDL)", err)
	t.Cleanup(func() { _, _ = sharedPool.Exec(ctxT(t), `DROP TABLE `+table) })
	f := fence.Fence{Name: "upgrade", Token: 3, LeaseID: driver.NewLeaseID()}
	_, err = sharedPool.Exec(ctx, `INSERT INTO `+table+` VALUES ('k', 'v0', $1, $2, $3)`, f.Name, int64(f.Token), f.LeaseID)
	wantOK(t, "INSERT (a row of the earlier version)", err)

	kv := postgres.NewKV(sharedPool, &postgres.KVOptions{Table: table})
	wantOK(t, "CreateSchema", kv.CreateSchema(ctx))
	wantOK(t, "CreateSchema again", kv.CreateSchema(ctx))
	if it, err := kv.Get(ctx, "k"); err != nil || string(it.Value) != "v0" || it.Fence != f {
		t.Fatalf("Get after the upgrade = %q, %+v, %v; want v0 with the row's fence", it.Value, it.Fence, err)
	}
	first := fence.WithWriteAttempt(ctx, "w1")
	wantOK(t, "Put(v1) as w1", kv.Put(first, "k", []byte("v1"), f))
	wantOK(t, "Put(v2) as w2", kv.Put(fence.WithWriteAttempt(ctx, "w2"), "k", []byte("v2"), f))
	wantOK(t, "Put(v1) as w1 again (late)", kv.Put(first, "k", []byte("v1"), f))
	if it, err := kv.Get(ctx, "k"); err != nil || string(it.Value) != "v2" {
		t.Fatalf("Get after w1's late attempt = %q, %v; want v2", it.Value, err)
	}
}
