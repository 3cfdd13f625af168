package fencehttp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// kindStores are the stores the semaphore and shared lock tests run the server
// on: the reference store and the embedded one (`fence serve`'s default).
func kindStores(t *testing.T) map[string]func(t *testing.T) (*fencehttp.Server, string) {
	return map[string]func(t *testing.T) (*fencehttp.Server, string){
		"inmem": func(t *testing.T) (*fencehttp.Server, string) {
			s, hs := newServer(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
			return s, hs.URL
		},
		"bolt": func(t *testing.T) (*fencehttp.Server, string) {
			s, hs, _ := newBoltServer(t, fencehttp.Config{})
			return s, hs.URL
		},
	}
}

// Item: through the client, a semaphore of 3 grants permits with slots 0, 1, 2
// and rising tokens; a fourth is held (all 3 permits); another limit is a
// *fence.LimitError (ErrInvalid) naming both limits, 409 limit_mismatch on the
// wire; Inspect and List show the limit and every holder; a released slot is the
// next permit's, and a waiting acquire is woken by the release.
func TestClient_Semaphore_SlotsHoldersLimitAndWake(t *testing.T) {
	for store, start := range kindStores(t) {
		t.Run(store, func(t *testing.T) {
			s, url := start(t)
			c := mustClient(t, url, nil)
			if f := fence.FeaturesOf(c); !f.Semaphores || !f.Shared {
				t.Fatalf("FeaturesOf(client): want both kinds, got %+v", f)
			}
			ctx := ctxFor(t)
			var permits []*fence.Lease
			for i := range 3 {
				l := mustAcquire(t, c, "pool", time.Minute, fence.WithLimit(3), fence.WithOwner(fmt.Sprint("w", i)))
				if l.Slot() != i || (i > 0 && l.Token() <= permits[i-1].Token()) {
					t.Fatalf("permit %d: want slot %d and a token above the last, got slot %d token %d", i+1, i, l.Slot(), l.Token())
				}
				permits = append(permits, l)
			}
			if got := metricValue(t, s, "fence_held_locks"); got != 1 {
				t.Errorf("fence_held_locks with 3 permits of one semaphore: want 1, got %v", got)
			}
			_, err := fence.TryAcquire(ctx, c, "pool", time.Minute, fence.WithLimit(3))
			var held *fence.HeldError
			if !errors.Is(err, fence.ErrNotAcquired) || !errors.As(err, &held) || held.Limit != 3 || held.ExpiresIn <= 0 {
				t.Fatalf("a fourth permit of 3: want ErrNotAcquired with a HeldError of limit 3 and time left, got %v", err)
			}
			a := call(t, "POST", url+"/v1/locks/pool/acquire", `{"limit":3}`, nil)
			wantError(t, "a fourth permit over the wire", a, 409, "held")
			if a.json["limit"] != float64(3) || !strings.HasPrefix(a.json["error"].(string), `all 3 permits of "pool" are held (the first expires in `) {
				t.Fatalf("a fourth permit over the wire: want limit 3 and the permits said, got %s", a.raw)
			}

			_, err = fence.TryAcquire(ctx, c, "pool", time.Minute, fence.WithLimit(5))
			var lim *fence.LimitError
			if !errors.Is(err, fence.ErrInvalid) || !errors.As(err, &lim) || *lim != (fence.LimitError{Name: "pool", Limit: 5, Held: 3}) {
				t.Fatalf("WithLimit(5) on a semaphore of 3: want a LimitError{pool, 5, 3} matching ErrInvalid, got %#v", err)
			}
			want := `acquire "pool": held with limit 3, not limit 5: every acquirer of a name must use the same limit`
			if err.Error() != want {
				t.Fatalf("WithLimit(5) on a semaphore of 3:\nwant %q\ngot  %q", want, err)
			}
			a = call(t, "POST", url+"/v1/locks/pool/acquire", `{"limit":5}`, nil)
			wantError(t, "another limit over the wire", a, 409, "limit_mismatch")
			if a.json["limit"] != float64(5) || a.json["held_limit"] != float64(3) || a.json["name"] != "pool" || a.json["error"] != want {
				t.Fatalf("another limit over the wire: want limit 5, held_limit 3, the name and the message, got %s", a.raw)
			}
			_, err = fence.TryAcquire(ctx, c, "pool", time.Minute)
			if !errors.As(err, &lim) || lim.Limit != 1 || !strings.Contains(err.Error(), "held with limit 3, not limit 1 (a lock)") {
				t.Fatalf("a lock on a semaphore of 3: want a LimitError of limit 1 (a lock), got %v", err)
			}

			info, err := c.Inspect(ctx, "pool")
			if err != nil || !info.Held || info.Limit != 3 || info.Shared || len(info.Holders) != 3 {
				t.Fatalf("Inspect of a semaphore of 3 with 3 permits: want limit 3 and 3 holders, got %+v, %v", info, err)
			}
			for i, h := range info.Holders {
				if h.Slot != i || h.Token != permits[i].Token() || h.Owner != fmt.Sprint("w", i) || h.ExpiresIn <= 0 || h.ExpiresIn > time.Minute {
					t.Fatalf("Inspect, holder %d: want slot %d, token %d, owner w%d and time left, got %+v", i, i, permits[i].Token(), i, h)
				}
			}
			if info.Token != permits[2].Token() {
				t.Fatalf("Inspect of a semaphore: want Token of the highest holder %d, got %d", permits[2].Token(), info.Token)
			}
			infos, err := c.List(ctx, fence.ListOptions{Prefix: "pool"})
			if err != nil || len(infos) != 1 || !infos[0].Equal(fence.LockInfo{Name: "pool", Held: true, Token: info.Token, Owner: info.Owner,
				LastToken: info.LastToken, ExpiresIn: infos[0].ExpiresIn, Limit: 3, Holders: infos[0].Holders}) || len(infos[0].Holders) != 3 {
				t.Fatalf("List: want the semaphore with its limit and 3 holders, got %+v, %v", infos, err)
			}
			st := call(t, "GET", url+"/v1/locks/pool", "", nil)
			for _, l := range permits {
				if strings.Contains(st.raw, l.ID()) {
					t.Fatalf("the state of a semaphore carries a lease id: %s", st.raw)
				}
			}

			// A waiting acquire is woken by the release of slot 1, and takes it.
			got := make(chan *fence.Lease, 1)
			go func() {
				l, err := c.Acquire(ctx, "pool", time.Minute, fence.WithLimit(3), fence.WithWait(20*time.Second))
				if err != nil {
					t.Errorf("waiting permit: %v", err)
				}
				got <- l
			}()
			time.Sleep(50 * time.Millisecond) // let it wait; it is granted whenever it comes
			if err := permits[1].Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case l := <-got:
				if l == nil || l.Slot() != 1 || l.Token() <= permits[2].Token() {
					t.Fatalf("the waiting permit: want slot 1 with the next token, got %v", l)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiting permit was not granted within 20s of a release")
			}
			if got := metricValue(t, s, "fence_held_locks"); got != 1 {
				t.Errorf("fence_held_locks after a permit's release: want 1 (still held), got %v", got)
			}
		})
	}
}

// Item: through the client, shared holders hold a name at once (no slot), an
// exclusive acquire is held by them, and while it waits new shared acquires are
// held too (writer preference); when the shared holders release, the exclusive
// one is granted a token above all of theirs.
func TestClient_Shared_ExclusiveWaitsAndIsPreferred(t *testing.T) {
	for store, start := range kindStores(t) {
		t.Run(store, func(t *testing.T) {
			_, url := start(t)
			c := mustClient(t, url, nil)
			ctx := ctxFor(t)
			var shared []*fence.Lease
			for range 3 {
				l := mustAcquire(t, c, "docs", time.Minute, fence.WithShared())
				if l.Slot() != 0 {
					t.Fatalf("a shared lease: want slot 0, got %d", l.Slot())
				}
				shared = append(shared, l)
			}
			if a := call(t, "POST", url+"/v1/locks/docs/acquire", `{"shared":true}`, nil); a.status != 200 || a.json["slot"] != nil {
				t.Fatalf("a shared acquire over the wire: want 200 without a slot, got %d %s", a.status, a.raw)
			} else {
				call(t, "POST", url+"/v1/locks/docs/release", `{"lease":"`+a.json["lease"].(string)+`"}`, nil)
			}
			info, err := c.Inspect(ctx, "docs")
			if err != nil || !info.Shared || info.Limit != 0 || len(info.Holders) != 3 {
				t.Fatalf("Inspect of 3 shared holders: want shared with 3 holders, got %+v, %v", info, err)
			}
			if _, err := fence.TryAcquire(ctx, c, "docs", time.Minute); !errors.Is(err, fence.ErrNotAcquired) {
				t.Fatalf("an exclusive acquire of a shared lock: want ErrNotAcquired, got %v", err)
			}
			got := make(chan *fence.Lease, 1)
			go func() {
				l, err := c.Acquire(ctx, "docs", time.Minute, fence.WithWait(20*time.Second))
				if err != nil {
					t.Errorf("the exclusive waiter: %v", err)
				}
				got <- l
			}()
			// Once the waiter is recorded, shared acquires are held. Until then one may
			// be granted: it is released at once, and the test tries again.
			deadline := time.Now().Add(10 * time.Second)
			for {
				l, err := fence.TryAcquire(ctx, c, "docs", time.Minute, fence.WithShared())
				if errors.Is(err, fence.ErrNotAcquired) {
					break
				}
				if err != nil {
					t.Fatalf("a shared acquire while an exclusive one waits: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatal("shared acquires were still granted 10s after an exclusive acquire began waiting")
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, l := range shared {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case l := <-got:
				if l == nil || l.Token() <= shared[2].Token() {
					t.Fatalf("the exclusive waiter: want a token above the shared ones' (%d), got %v", shared[2].Token(), l)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the exclusive waiter was not granted within 20s of the shared holders' release")
			}
		})
	}
}

// Item: a store that lacks semaphores or shared locks answers 501 naming the
// kind, which the client returns as fence.ErrNotImplemented; nothing is granted.
func TestServer_KindsTheStoreLacks_501NotImplemented(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{Locker: lockerOnly{inmem.NewLocker(inmem.Options{})}})
	c := mustClient(t, hs.URL, nil)
	for _, tc := range []struct {
		opt  fence.AcquireOption
		body string
		want string
	}{
		{fence.WithLimit(2), `{"limit":2}`, `acquire "k": semaphores ("limit") are not supported by this server's store`},
		{fence.WithShared(), `{"shared":true}`, `acquire "k": shared locks ("shared") are not supported by this server's store`},
	} {
		_, err := c.Acquire(ctxFor(t), "k", time.Minute, tc.opt)
		if !errors.Is(err, fence.ErrNotImplemented) || !errors.Is(err, fencehttp.ErrNotImplemented) || err.Error() != tc.want {
			t.Errorf("%s on a store without it: want ErrNotImplemented %q, got %v", tc.body, tc.want, err)
		}
		a := call(t, "POST", hs.URL+"/v1/locks/k/acquire", tc.body, nil)
		wantError(t, tc.body+" on a store without it", a, 501, "not_implemented")
	}
	// lockerOnly has no Inspector: a lock's token shows that nothing was granted.
	l := mustAcquire(t, c, "k", time.Minute)
	if l.Token() != 1 {
		t.Fatalf("a lock after the refused kinds: want token 1 (nothing granted before), got %d", l.Token())
	}
}

// Item: a bad limit is 400 naming the field: 0, above 1024, not an integer, or
// with shared; limit 1 is a lock, answered without a slot.
func TestServer_BadLimit_400NamingTheField(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	for _, tc := range []struct{ body, field, msg string }{
		{`{"limit":0}`, "limit", `acquire "x": invalid limit "0": must be 1 to 1024`},
		{`{"limit":1025}`, "limit", `acquire "x": invalid limit "1025": must be 1 to 1024`},
		{`{"limit":-3}`, "limit", `acquire "x": invalid limit "-3": must be 1 to 1024`},
		{`{"limit":2,"shared":true}`, "shared", `acquire "x": invalid shared "true": cannot be combined with limit 2: a semaphore's permits are not shared`},
		{`{"limit":"3"}`, "body", `acquire "x": invalid body: field "limit" must be an integer, got string`},
		{`{"shared":1}`, "body", `acquire "x": invalid body: field "shared" must be true or false, got number`},
	} {
		a := call(t, "POST", hs.URL+"/v1/locks/x/acquire", tc.body, nil)
		wantError(t, tc.body, a, 400, "invalid")
		if a.json["field"] != tc.field || a.json["error"] != tc.msg {
			t.Errorf("%s: want field %q and %q, got %s", tc.body, tc.field, tc.msg, a.raw)
		}
	}
	a := call(t, "POST", hs.URL+"/v1/locks/x/acquire", `{"limit":1}`, nil)
	if a.status != 200 || a.json["slot"] != nil || a.json["token"] != float64(1) {
		t.Fatalf("limit 1: want a lock granted, without a slot, got %d %s", a.status, a.raw)
	}
	if a := call(t, "GET", hs.URL+"/v1/locks/x", "", nil); a.json["limit"] != nil || a.json["holders"] != nil {
		t.Fatalf("the state of a lock taken with limit 1: want no limit and no holders, got %s", a.raw)
	}
}
