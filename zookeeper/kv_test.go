package zookeeper_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/zookeeper"
)

// openKV returns a KV on its own connection to the shared server, closed at cleanup.
// openKV returns a KV of NewKV (no issuance check: the tests make their fences up)
// on a connection of its own.
func openKV(t *testing.T, opts *zookeeper.Options) *zookeeper.KV {
	t.Helper()
	kv, err := zookeeper.NewKV(rawConn(t), opts)
	if err != nil {
		t.Fatalf("NewKV = %v", err)
	}
	return kv
}

func openStore(t *testing.T, opts *zookeeper.Options) *zookeeper.Store {
	t.Helper()
	return start(t, zookeeper.OpenStore, opts)
}

func TestKV_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return openKV(t, nil) })
}

// A late attempt of a write never replaces a later write of the same holder (P3),
// on a KV alone and on a Store's KV.
func TestKV_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return openKV(t, nil) })
}

func TestStore_WriteAttempts(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return openStore(t, nil) }, fencetest.WithGuardAsIssuer())
}

func TestKV_Root_DerivedFromLockRoot(t *testing.T) {
	for _, tc := range []struct{ root, want string }{
		{"", "/fence/kv"},
		{"/fence/locks", "/fence/kv"},
		{"/app/locks/", "/app/kv"},
		{"/locks", "/locks-kv"},
		{"/myapp", "/myapp-kv"},
	} {
		kv, err := zookeeper.NewKV(&zk.Conn{}, &zookeeper.Options{Root: tc.root})
		if err != nil {
			t.Fatalf("NewKV(root %q) = %v; want a KV", tc.root, err)
		}
		if got := kv.Root(); got != tc.want {
			t.Errorf("NewKV(root %q).Root() = %q; want %q", tc.root, got, tc.want)
		}
	}
}

func TestNewKV_BadInput_ErrInvalid(t *testing.T) {
	if _, err := zookeeper.NewKV(nil, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewKV(nil conn) = %v; want fence.ErrInvalid", err)
	}
	if _, err := zookeeper.NewKV(&zk.Conn{}, &zookeeper.Options{Root: "relative"}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewKV(root \"relative\") = %v; want fence.ErrInvalid", err)
	}
}

func TestKV_Put_ValueSizeLimit(t *testing.T) {
	kv := openKV(t, nil)
	ctx := testCtx(t)
	f := fence.Fence{Name: t.Name(), Token: 1, LeaseID: driver.NewLeaseID()}
	max := bytes.Repeat([]byte{0xFF}, zookeeper.MaxValueSize)
	if err := kv.Put(ctx, "big", max, f); err != nil {
		t.Fatalf("Put of MaxValueSize (%d) bytes = %v; want nil", len(max), err)
	}
	it, err := kv.Get(ctx, "big")
	if err != nil || !bytes.Equal(it.Value, max) {
		t.Fatalf("Get after Put of %d bytes = %d bytes, %v; want the same bytes", len(max), len(it.Value), err)
	}
	err = kv.Put(ctx, "big", append(max, 0), f)
	if !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "zookeeper: ") {
		t.Fatalf("Put of MaxValueSize+1 bytes = %v; want a zookeeper: error matching fence.ErrInvalid", err)
	}
}

// A znode under the KV root that is not a record is refused, not overwritten.
func TestKV_ForeignZnode_ErrInvalidNotOverwritten(t *testing.T) {
	root := "/" + strings.ReplaceAll(t.Name(), "/", "_") + "/locks"
	kv := openKV(t, &zookeeper.Options{Root: root})
	conn, _, err := zk.Connect([]string{srv.Addr}, 10*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := testCtx(t)
	f := fence.Fence{Name: "l", Token: 1, LeaseID: driver.NewLeaseID()}
	if err := kv.Put(ctx, "k", []byte("v"), f); err != nil { // creates the root
		t.Fatalf("Put = %v; want nil", err)
	}
	if _, err := conn.Create(kv.Root()+"/foreign", []byte("not json"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "foreign"); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Get of a foreign znode = %v; want fence.ErrInvalid", err)
	}
	if err := kv.Put(ctx, "foreign", []byte("x"), f); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("Put over a foreign znode = %v; want fence.ErrInvalid", err)
	}
	data, _, err := conn.Get(kv.Root() + "/foreign")
	if err != nil || string(data) != "not json" {
		t.Errorf("foreign znode after Put = %q, %v; want %q untouched", data, err, "not json")
	}
}

// Writers on separate sessions race on one key; the CAS loop admits each token at
// most once in order: the highest wins and every refusal names a higher token.
func TestKV_Put_TwoSessionsRacing_HighestWins(t *testing.T) {
	a, b := openKV(t, nil), openKV(t, nil)
	ctx := testCtx(t)
	name, key := t.Name(), t.Name()+"/key"
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for tok := 1; tok <= n; tok++ {
		kv := a
		if tok%2 == 0 {
			kv = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[tok] = kv.Put(ctx, key, []byte{byte(tok)}, fence.Fence{Name: name, Token: fence.Token(tok), LeaseID: driver.NewLeaseID()})
		}()
	}
	wg.Wait()
	for tok := 1; tok <= n; tok++ {
		var stale *fence.StaleTokenError
		if errs[tok] != nil && (!errors.As(errs[tok], &stale) || stale.Highest <= fence.Token(tok)) {
			t.Errorf("Put(token %d) = %v; want nil or a stale-token error with a higher token", tok, errs[tok])
		}
	}
	if errs[n] != nil {
		t.Errorf("Put(highest token %d) = %v; want nil", n, errs[n])
	}
	it, err := a.Get(ctx, key)
	if err != nil || it.Fence.Token != n || !bytes.Equal(it.Value, []byte{n}) {
		t.Fatalf("Get = %v token %d, %v; want [%d] token %d", it.Value, it.Fence.Token, err, n, n)
	}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
