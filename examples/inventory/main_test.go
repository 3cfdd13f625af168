package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// dsn is the database the tests share (each test uses its own snapshot ids).
// Empty under -short.
var dsn string

func TestMain(m *testing.M) {
	os.Exit(servertest.RunWithPostgres(m, "inventory", &dsn))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startService serves the inventory on a real 127.0.0.1 listener.
func startService(t *testing.T) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := servertest.Pool(t, dsn)
	svc, err := newService(ctxFor(t), pool)
	if err != nil {
		t.Fatalf("newService: %v", err)
	}
	srv := httptest.NewServer(svc.handler())
	t.Cleanup(srv.Close)
	return srv, pool
}

// openLocks opens the embedded durable lock store (what `fence serve` runs on).
func openLocks(t *testing.T) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "locks.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func getSnapshot(t *testing.T, base, id string) (int, snapshot) {
	t.Helper()
	resp, err := http.Get(base + "/inventory/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s snapshot
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, s
}

func decodeError(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	return m
}

// TestPausedWriterRefused is the seed's incident on the inventory snapshot: writer
// A takes the lock, writes, pauses past its TTL; writer B takes the expired lock
// and writes; A wakes and writes its stale snapshot. The service refuses it (409,
// with B's token as the highest) and keeps B's data.
func TestPausedWriterRefused(t *testing.T) {
	srv, _ := startService(t)
	locks := openLocks(t)
	ctx := ctxFor(t)
	const ttl = 300 * time.Millisecond
	id := fmt.Sprintf("paused-%d", time.Now().UnixNano())

	a, err := locks.Acquire(ctx, "inventory", ttl)
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	status, body, err := putSnapshot(ctx, http.DefaultClient, srv.URL, id, []byte(`{"apples": 10}`), a.Fence())
	if err != nil || status != 200 {
		t.Fatalf("A's first write: %d %s %v, want 200", status, body, err)
	}

	// A pauses (a GC pause, a stopped VM): it neither renews nor writes. B waits
	// for the lock, which the store grants only once A's lease has expired.
	b, err := locks.Acquire(ctx, "inventory", 10*time.Second, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("B acquire: %v", err)
	}
	defer b.Release(context.WithoutCancel(ctx))
	if !time.Now().After(a.Deadline()) {
		t.Fatalf("B was granted the lock at %v, before A's lease deadline %v", time.Now(), a.Deadline())
	}
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	status, body, err = putSnapshot(ctx, http.DefaultClient, srv.URL, id, []byte(`{"apples": 7, "pears": 2}`), b.Fence())
	if err != nil || status != 200 {
		t.Fatalf("B's write: %d %s %v, want 200", status, body, err)
	}

	// A wakes, still believes it holds the lock, and writes from its old state.
	status, body, err = putSnapshot(ctx, http.DefaultClient, srv.URL, id, []byte(`{"apples": 11}`), a.Fence())
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusConflict {
		t.Fatalf("A's write after the pause: %d %s, want 409", status, body)
	}
	e := decodeError(t, body)
	if e["code"] != "stale_token" || e["highest"] != float64(b.Token()) || e["token"] != float64(a.Token()) {
		t.Fatalf("A's refusal %v, want code stale_token, highest %d (B's), token %d (A's)", e, b.Token(), a.Token())
	}

	code, snap := getSnapshot(t, srv.URL, id)
	want := map[string]int64{"apples": 7, "pears": 2}
	if code != 200 || snap.Token != b.Token() || fmt.Sprint(snap.Data) != fmt.Sprint(want) {
		t.Fatalf("snapshot after the stale write = %d %+v, want B's %v with token %d", code, snap, want, b.Token())
	}
}

// TestPutCommand runs `inventory put` as a child of `fence lock` would: the fence
// comes from FENCE_LOCK, FENCE_TOKEN and FENCE_LEASE. A stale token exits 3.
func TestPutCommand(t *testing.T) {
	srv, _ := startService(t)
	locks := openLocks(t)
	ctx := ctxFor(t)
	id := fmt.Sprintf("cmd-%d", time.Now().UnixNano())
	putAs := func(l *fence.Lease, data string) (int, string, string) {
		t.Setenv("FENCE_LOCK", l.Name())
		t.Setenv("FENCE_TOKEN", l.Token().String())
		t.Setenv("FENCE_LEASE", l.ID())
		var out, errb bytes.Buffer
		code := run([]string{"put", "--url", srv.URL, id, data}, &out, &errb)
		return code, out.String(), errb.String()
	}
	first, err := locks.Acquire(ctx, "inventory-cmd", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := locks.Acquire(ctx, "inventory-cmd", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(context.WithoutCancel(ctx))
	if code, out, errs := putAs(second, `{"apples": 1}`); code != 0 || !strings.Contains(out, `"apples":1`) {
		t.Fatalf("put with the current lease: exit %d, stdout %q, stderr %q; want 0 and the snapshot", code, out, errs)
	}
	code, _, errs := putAs(first, `{"apples": 99}`)
	if code != 3 || !strings.Contains(errs, "stale token") {
		t.Fatalf("put with the released earlier lease: exit %d, stderr %q; want 3 and the stale token", code, errs)
	}
	if _, snap := getSnapshot(t, srv.URL, id); snap.Data["apples"] != 1 {
		t.Fatalf("snapshot %+v, want apples 1", snap)
	}
	t.Setenv("FENCE_TOKEN", "")
	var errb bytes.Buffer
	if code := run([]string{"put", "--url", srv.URL, id, `{}`}, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "FENCE_TOKEN") {
		t.Fatalf("put without FENCE_TOKEN: exit %d, stderr %q; want 2 naming FENCE_TOKEN", code, errb.String())
	}
}

// TestBadRequests: a write without the fence headers is 400 naming the header; a
// bad body is the handler's own 400 and does not advance the fence.
func TestBadRequests(t *testing.T) {
	srv, _ := startService(t)
	ctx := ctxFor(t)
	id := fmt.Sprintf("bad-%d", time.Now().UnixNano())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/inventory/"+id, strings.NewReader(`{"apples": 1}`))
	req.Header.Set("Fence-Token", "5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]any
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e["code"] != "invalid" || e["field"] != "Fence-Lock" {
		t.Fatalf("write without Fence-Lock: %d %v, want 400 invalid naming Fence-Lock", resp.StatusCode, e)
	}

	f := fence.Fence{Name: "inventory-bad", Token: 5, LeaseID: "L5"}
	status, body, err := putSnapshot(ctx, http.DefaultClient, srv.URL, id, []byte(`[1, 2]`), f)
	if err != nil || status != 400 || decodeError(t, body)["field"] != "body" {
		t.Fatalf("bad body: %d %s %v, want the handler's 400 naming the body", status, body, err)
	}
	// The refused body rolled the fence back: a lower token still gets in.
	f.Token, f.LeaseID = 4, "L4"
	if status, body, err := putSnapshot(ctx, http.DefaultClient, srv.URL, id, []byte(`{"apples": 4}`), f); err != nil || status != 200 {
		t.Fatalf("write with token 4 after the refused token 5: %d %s %v, want 200", status, body, err)
	}
	if code, _ := getSnapshot(t, srv.URL, "never-written"); code != 404 {
		t.Fatalf("GET of a snapshot never written: %d, want 404", code)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"serve"}, {"put", "only-id"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
			t.Errorf("run(%q) = %d, stderr %q; want 2 with the usage", args, code, errb.String())
		}
	}
}
