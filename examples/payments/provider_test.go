//go:build unix

package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence/idempotency/pgstore"
)

// startTestProvider serves a provider over the test database's idempotency table.
func startTestProvider(t *testing.T) *provider {
	t.Helper()
	cfg := testConfig(t) // skips under -short
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := pgstore.New(pool, nil)
	if err := createSchema(ctx, pool, store.CreateSchema); err != nil {
		t.Fatal(err)
	}
	p, err := startProvider(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestProvider_SameKey_ChargesOnceAndReplays(t *testing.T) {
	p := startTestProvider(t)
	ctx := context.Background()
	batch := "provider-key-" + t.Name() + time.Now().Format("150405.000000000")
	a := &providerClient{base: p.URL(), instance: 1, idem: true, http: http.DefaultClient}
	b := &providerClient{base: p.URL(), instance: 2, idem: true, http: http.DefaultClient}

	id1, replayed1, err := a.charge(ctx, batch, 7)
	if err != nil {
		t.Fatal(err)
	}
	id2, replayed2, err := b.charge(ctx, batch, 7)
	if err != nil {
		t.Fatal(err)
	}
	if replayed1 || !replayed2 || id1 != id2 {
		t.Errorf("charges = (%s, replayed %v), (%s, replayed %v); want the second to replay the first", id1, replayed1, id2, replayed2)
	}
	if got := p.chargeCounts()[batch+"/7"]; got != 1 {
		t.Errorf("charges of line 7 = %d, want 1", got)
	}
}

func TestProvider_NoKey_ChargesEveryCall(t *testing.T) {
	p := startTestProvider(t)
	ctx := context.Background()
	batch := "provider-nokey-" + time.Now().Format("150405.000000000")
	c := &providerClient{base: p.URL(), instance: 1, http: http.DefaultClient}
	for i := 0; i < 2; i++ {
		if _, replayed, err := c.charge(ctx, batch, 3); err != nil || replayed {
			t.Fatalf("charge %d: replayed %v, err %v; want a fresh charge", i, replayed, err)
		}
	}
	if got := p.chargeCounts()[batch+"/3"]; got != 2 {
		t.Errorf("charges of line 3 = %d, want 2", got)
	}
}

func TestProvider_BadRequest_400(t *testing.T) {
	p := startTestProvider(t)
	resp, err := http.Post(p.URL()+"/v1/charges", "application/json", strings.NewReader(`{"payout":""}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status = %d, want 400", resp.StatusCode)
	}
	if n := len(p.chargeCounts()); n != 0 {
		t.Errorf("payouts charged = %d, want 0", n)
	}
}
