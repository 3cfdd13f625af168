package redis

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/internal/servers/servertest"
)

// newKV returns a KV on the package's server under a prefix of its own, with the
// client it uses.
func newKV(t testing.TB) (*KV, *goredis.Client) {
	t.Helper()
	c := newClient(t, server(t).Addr)
	kv, err := NewKV(c, &Options{Prefix: uniqueName(t) + ":"})
	if err != nil {
		t.Fatalf("NewKV: %v", err)
	}
	return kv, c
}

// TestKV_Conformance runs the shared guard suite against the package's
// redis-server. Subtests use unique keys, so one KV serves them all.
func TestKV_Conformance(t *testing.T) {
	kv, _ := newKV(t)
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return kv })
}

// A late attempt of a write never replaces a later write of the same holder (P3).
func TestKV_WriteAttempts(t *testing.T) {
	kv, _ := newKV(t)
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return kv })
}

// Two KVs on two clients (two servers of `fence serve`) share records: what one
// accepted fences off the other.
func TestKV_TwoClients_ShareFences(t *testing.T) {
	ctx := ctxT(t)
	one, _ := newKV(t)
	two, err := NewKV(newClient(t, server(t).Addr), &Options{Prefix: one.prefix})
	if err != nil {
		t.Fatal(err)
	}
	f5 := fence.Fence{Name: "lock", Token: 5, LeaseID: driver.NewLeaseID()}
	if err := one.Put(ctx, "k", []byte("five"), f5); err != nil {
		t.Fatalf("Put(5) through one: %v", err)
	}
	err = two.Put(ctx, "k", []byte("four"), fence.Fence{Name: "lock", Token: 4, LeaseID: driver.NewLeaseID()})
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || st.Highest != 5 || st.Token != 4 {
		t.Fatalf("Put(4) through two after Put(5) through one = %v; want a *fence.StaleTokenError{Token: 4, Highest: 5}", err)
	}
	it, err := two.Get(ctx, "k")
	if err != nil || string(it.Value) != "five" || it.Fence != f5 {
		t.Fatalf("Get through two = %q, %+v, %v; want %q, %+v, nil", it.Value, it.Fence, err, "five", f5)
	}
}

// Tokens near 2^53 are compared exactly: the script's doubles hold them, and one
// above MaxToken never gets to the script.
func TestKV_Put_TokensNearMaxToken_ComparedExactly(t *testing.T) {
	ctx := ctxT(t)
	kv, _ := newKV(t)
	lease := driver.NewLeaseID()
	at := func(tok fence.Token) fence.Fence {
		return fence.Fence{Name: "lock", Token: tok, LeaseID: driver.NewLeaseID()}
	}
	if err := kv.Put(ctx, "k", []byte("a"), fence.Fence{Name: "lock", Token: fence.MaxToken - 1, LeaseID: lease}); err != nil {
		t.Fatalf("Put(MaxToken-1) = %v; want nil", err)
	}
	if err := kv.Put(ctx, "k", []byte("b"), fence.Fence{Name: "lock", Token: fence.MaxToken - 1, LeaseID: lease}); err != nil {
		t.Fatalf("second Put(MaxToken-1) under the same lease = %v; want nil", err)
	}
	err := kv.Put(ctx, "k", []byte("c"), at(fence.MaxToken-1))
	var st *fence.StaleTokenError
	if !errors.As(err, &st) || !st.SameToken || st.Highest != fence.MaxToken-1 {
		t.Fatalf("Put(MaxToken-1) under another lease = %v; want a same-token *fence.StaleTokenError with Highest %d", err, fence.MaxToken-1)
	}
	if err := kv.Put(ctx, "k", []byte("d"), at(fence.MaxToken)); err != nil {
		t.Fatalf("Put(MaxToken) after MaxToken-1 = %v; want nil (a double must tell them apart)", err)
	}
	err = kv.Put(ctx, "k", []byte("e"), at(fence.MaxToken-1))
	if !errors.As(err, &st) || st.Highest != fence.MaxToken || st.SameToken {
		t.Fatalf("Put(MaxToken-1) after MaxToken = %v; want a *fence.StaleTokenError with Highest %d", err, fence.MaxToken)
	}
	err = kv.Put(ctx, "k", []byte("f"), at(fence.MaxToken+1))
	if !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Put(MaxToken+1) = %v; want fence.ErrInvalid", err)
	}
	it, err := kv.Get(ctx, "k")
	if err != nil || string(it.Value) != "d" || it.Fence.Token != fence.MaxToken {
		t.Fatalf("Get = %q token %d, %v; want %q token %d", it.Value, it.Fence.Token, err, "d", fence.MaxToken)
	}
}

// Exactly MaxValueLen bytes are stored; one more is refused before Redis is asked,
// and the old value stays.
func TestKV_Put_ValueLimit(t *testing.T) {
	ctx := ctxT(t)
	kv, _ := newKV(t)
	big := bytes.Repeat([]byte{0xa5}, MaxValueLen)
	if err := kv.Put(ctx, "k", big, fence.Fence{Name: "lock", Token: 1}); err != nil {
		t.Fatalf("Put of MaxValueLen bytes = %v; want nil", err)
	}
	err := kv.Put(ctx, "k", append(big, 0), fence.Fence{Name: "lock", Token: 2})
	var inv *fence.InvalidError
	if !errors.As(err, &inv) || inv.Field != "value" {
		t.Fatalf("Put of MaxValueLen+1 bytes = %v; want a *fence.InvalidError for the value", err)
	}
	it, err := kv.Get(ctx, "k")
	if err != nil || !bytes.Equal(it.Value, big) || it.Fence.Token != 1 {
		t.Fatalf("Get after the refused Put = %d bytes token %d, %v; want %d bytes token 1", len(it.Value), it.Fence.Token, err, len(big))
	}
}

// The record is a hash of the documented layout, in the key's own slot, and never
// expires.
func TestKV_Record_LayoutAndNoExpiry(t *testing.T) {
	ctx := ctxT(t)
	kv, c := newKV(t)
	key := "a{b}%c"
	f := fence.Fence{Name: "lock", Token: 7, LeaseID: driver.NewLeaseID()}
	if err := kv.Put(ctx, key, []byte("v"), f); err != nil {
		t.Fatal(err)
	}
	rk := kv.prefix + "{a%7Bb%7D%25c}:kv"
	got, err := c.HGetAll(ctx, rk).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"name": "lock", "token": "7", "lease": f.LeaseID, "value": "v"}
	if len(got) != len(want) {
		t.Fatalf("HGETALL %s = %v; want %v", rk, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("HGETALL %s = %v; want %v", rk, got, want)
		}
	}
	if ttl, err := c.PTTL(ctx, rk).Result(); err != nil || ttl != -1 {
		t.Fatalf("PTTL %s = %v, %v; want -1 (no expiry)", rk, ttl, err)
	}
}

// A record key holding foreign data is refused with ErrWrongType and left alone.
func TestKV_ForeignData_ErrWrongTypeAndUntouched(t *testing.T) {
	ctx := ctxT(t)
	kv, c := newKV(t)
	f := fence.Fence{Name: "lock", Token: 3}
	for _, tc := range []struct {
		desc  string
		setup func(rk string) error
	}{
		{"a string", func(rk string) error { return c.Set(ctx, rk, "x", 0).Err() }},
		{"a list", func(rk string) error { return c.RPush(ctx, rk, "x").Err() }},
		{"a hash without a fence", func(rk string) error { return c.HSet(ctx, rk, "value", "x").Err() }},
		{"a hash with a bad token", func(rk string) error {
			return c.HSet(ctx, rk, "name", "lock", "token", "1e3", "lease", "").Err()
		}},
		{"a hash with a token above MaxToken", func(rk string) error {
			return c.HSet(ctx, rk, "name", "lock", "token", "9007199254740992", "lease", "").Err()
		}},
	} {
		key := uniqueName(t)
		rk := kv.recordKey(key)
		if err := tc.setup(rk); err != nil {
			t.Fatal(err)
		}
		dump := func() string { s, _ := c.Dump(ctx, rk).Result(); return s }
		before := dump()
		if err := kv.Put(ctx, key, []byte("v"), f); !errors.Is(err, ErrWrongType) {
			t.Errorf("Put on %s = %v; want ErrWrongType", tc.desc, err)
		}
		if err := kv.Fence(ctx, key, f); !errors.Is(err, ErrWrongType) {
			t.Errorf("Fence on %s = %v; want ErrWrongType", tc.desc, err)
		}
		if _, err := kv.Get(ctx, key); !errors.Is(err, ErrWrongType) {
			t.Errorf("Get on %s = %v; want ErrWrongType", tc.desc, err)
		}
		if after := dump(); after != before {
			t.Errorf("%s was changed by the refused calls", tc.desc)
		}
	}
}

// An empty value is a written value (non-nil), unlike a key only fenced.
func TestKV_Get_EmptyValueVersusFencedOnly(t *testing.T) {
	ctx := ctxT(t)
	kv, _ := newKV(t)
	if err := kv.Put(ctx, "empty", nil, fence.Fence{Name: "lock", Token: 1}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Fence(ctx, "fenced", fence.Fence{Name: "lock", Token: 1}); err != nil {
		t.Fatal(err)
	}
	it, err := kv.Get(ctx, "empty")
	if err != nil || it.Value == nil || len(it.Value) != 0 {
		t.Fatalf("Get of a key written with an empty value = %#v, %v; want a non-nil empty value", it.Value, err)
	}
	it, err = kv.Get(ctx, "fenced")
	if err != nil || it.Value != nil || it.Fence.Token != 1 {
		t.Fatalf("Get of a key only fenced = %#v token %d, %v; want a nil value, token 1", it.Value, it.Fence.Token, err)
	}
}

// Fence keeps the stored value; a namespace mismatch names both locks.
func TestKV_Fence_KeepsValue_OtherNamespaceRefused(t *testing.T) {
	ctx := ctxT(t)
	kv, _ := newKV(t)
	if err := kv.Put(ctx, "k", []byte("v"), fence.Fence{Name: "a", Token: 1}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Fence(ctx, "k", fence.Fence{Name: "a", Token: 2}); err != nil {
		t.Fatal(err)
	}
	err := kv.Fence(ctx, "k", fence.Fence{Name: "b", Token: 9})
	var ne *fence.NamespaceError
	if !errors.As(err, &ne) || ne.Want != "a" || ne.Got != "b" || !strings.HasPrefix(err.Error(), "redis: fence ") {
		t.Fatalf("Fence with lock b on a key of lock a = %v; want a *fence.NamespaceError{Want: a, Got: b} prefixed \"redis: fence \"", err)
	}
	it, err := kv.Get(ctx, "k")
	if err != nil || string(it.Value) != "v" || it.Fence.Token != 2 || it.Fence.Name != "a" {
		t.Fatalf("Get = %q %v, %v; want %q a#2", it.Value, it.Fence, err, "v")
	}
}

func TestNewKV_BadArguments_ErrInvalid(t *testing.T) {
	if _, err := NewKV(nil, nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewKV(nil) = %v; want fence.ErrInvalid", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := NewKV(c, &Options{Prefix: "a{b"}); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("NewKV with prefix %q = %v; want fence.ErrInvalid", "a{b", err)
	}
}

// An unreachable server is fence.ErrUnavailable, not a bare driver error.
func TestKV_Unreachable_ErrUnavailable(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	kv, err := NewKV(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := kv.Put(ctx, "k", []byte("v"), fence.Fence{Name: "l", Token: 1}); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Put to an unreachable server = %v; want fence.ErrUnavailable", err)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Get from an unreachable server = %v; want fence.ErrUnavailable", err)
	}
}

// With WaitReplicas, a Put returns only once the replica has the record; when fewer
// replicas acknowledge than asked, the Put says ErrUnavailable (written on the
// primary, fate unknown) instead of claiming success.
func TestKV_Put_WaitReplicas(t *testing.T) {
	servertest.SkipIfShort(t)
	ctx := ctxT(t)
	primary := servertest.Redis(t, "--repl-diskless-sync-delay", "0")
	replica := servertest.RedisReplica(t, primary)
	pc, rc := newClient(t, primary.Addr), newClient(t, replica.Addr)
	// Empty the script cache first: the pipelined EVALSHA+WAIT must fall back to EVAL.
	if err := pc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	kv, err := NewKV(pc, &Options{WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for tok := fence.Token(1); tok <= 3; tok++ {
		v := fmt.Sprintf("v%d", tok)
		if err := kv.Put(ctx, "k", []byte(v), fence.Fence{Name: "l", Token: tok}); err != nil {
			t.Fatalf("Put(%d) with WaitReplicas 1 and one replica = %v; want nil", tok, err)
		}
		// Acknowledged by WAIT: the replica has applied it, no polling needed.
		if got, err := rc.HGet(ctx, kv.recordKey("k"), "value").Result(); err != nil || got != v {
			t.Fatalf("replica right after Put(%d): value %q, %v; want %q", tok, got, err, v)
		}
	}
	err = kv.Put(ctx, "k", []byte("old"), fence.Fence{Name: "l", Token: 2})
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale Put with WaitReplicas = %v; want fence.ErrStaleToken", err)
	}

	two, err := NewKV(pc, &Options{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = two.Put(ctx, "k", []byte("v4"), fence.Fence{Name: "l", Token: 4})
	if !errors.Is(err, fence.ErrUnavailable) || !strings.Contains(err.Error(), "1 of 2 replicas") {
		t.Fatalf("Put with WaitReplicas 2 and one replica = %v; want fence.ErrUnavailable saying 1 of 2 replicas acknowledged", err)
	}
}

func TestNewKV_BadWaitOptions_ErrInvalid(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []Options{{WaitReplicas: -1}, {WaitAOFLocal: 2}, {WaitTimeout: time.Microsecond}} {
		if _, err := NewKV(c, &o); !errors.Is(err, fence.ErrInvalid) || !strings.HasPrefix(err.Error(), "redis: new kv: ") {
			t.Errorf("NewKV(%+v) = %v; want fence.ErrInvalid prefixed \"redis: new kv: \"", o, err)
		}
	}
}
