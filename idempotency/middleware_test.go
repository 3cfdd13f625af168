package idempotency_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence/idempotency"
)

// call sends a request through h and returns the recorded response.
func call(h http.Handler, method, path, key, body string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set(idempotency.HeaderKey, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("want status %d, got %d: %s", status, w.Code, w.Body)
	}
}

func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var e struct{ Error, Code string }
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
		t.Fatalf("want a JSON error body, got %q (%v)", w.Body, err)
	}
	return e.Code
}

// counting is a handler that creates an order per request it runs.
type counting struct{ runs atomic.Int64 }

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.Header().Set("Set-Cookie", "session=secret")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d,"echo":%q}`, n, body)
}

func TestMiddleware_FirstRuns_RetryReplaysStoredResponse(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		c := &counting{}
		h := idempotency.Middleware(ts.store, idempotency.Options{})(c)
		first := call(h, "POST", "/orders", `"key-1"`, "pay 10")
		wantStatus(t, first, http.StatusCreated)
		retry := call(h, "POST", "/orders", "key-1", "pay 10")
		wantStatus(t, retry, http.StatusCreated)
		if c.runs.Load() != 1 {
			t.Fatalf("want the handler run once, got %d", c.runs.Load())
		}
		if retry.Body.String() != first.Body.String() {
			t.Fatalf("want the replayed body %q, got %q", first.Body, retry.Body)
		}
		if got := retry.Header().Get(idempotency.HeaderReplayed); got != "true" {
			t.Fatalf("want %s: true on the replay, got %q", idempotency.HeaderReplayed, got)
		}
		if first.Header().Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("the first response must not be marked replayed")
		}
		if got := retry.Header().Get("Location"); got != "/orders/1" {
			t.Fatalf("want Location replayed as /orders/1, got %q", got)
		}
		if got := retry.Header().Get("Set-Cookie"); got != "" {
			t.Fatalf("Set-Cookie must not be stored, got %q on the replay", got)
		}
	})
}

func TestMiddleware_SameKeyOtherPayload_422(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		c := &counting{}
		h := idempotency.Middleware(ts.store, idempotency.Options{})(c)
		wantStatus(t, call(h, "POST", "/orders", "k", "pay 10"), http.StatusCreated)
		for _, other := range []struct{ path, body string }{{"/orders", "pay 99"}, {"/refunds", "pay 10"}, {"/orders?x=1", "pay 10"}} {
			w := call(h, "POST", other.path, "k", other.body)
			wantStatus(t, w, http.StatusUnprocessableEntity)
			if code := errorCode(t, w); code != "idempotency_key_reused" {
				t.Fatalf("want code idempotency_key_reused, got %q", code)
			}
		}
		if c.runs.Load() != 1 {
			t.Fatalf("want 1 run, got %d", c.runs.Load())
		}
	})
}

func TestMiddleware_MissingKey_400WhenRequired_PassThroughOtherwise(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		c := &counting{}
		strict := idempotency.Middleware(ts.store, idempotency.Options{Required: true})(c)
		w := call(strict, "POST", "/orders", "", "x")
		wantStatus(t, w, http.StatusBadRequest)
		if code := errorCode(t, w); code != "idempotency_key_missing" {
			t.Fatalf("want code idempotency_key_missing, got %q", code)
		}
		wantStatus(t, call(strict, "GET", "/orders", "", ""), http.StatusCreated) // GET is not covered
		lax := idempotency.Middleware(ts.store, idempotency.Options{})(c)
		wantStatus(t, call(lax, "POST", "/orders", "", "x"), http.StatusCreated)
		wantStatus(t, call(lax, "POST", "/orders", "", "x"), http.StatusCreated)
		if c.runs.Load() != 3 {
			t.Fatalf("want 3 unprotected runs, got %d", c.runs.Load())
		}
		for _, bad := range []string{`""`, "has space", strings.Repeat("k", 256), "a,b"} {
			w := call(lax, "POST", "/orders", bad, "x")
			wantStatus(t, w, http.StatusBadRequest)
			if code := errorCode(t, w); code != "idempotency_key_invalid" {
				t.Fatalf("key %q: want code idempotency_key_invalid, got %q", bad, code)
			}
		}
	})
}

// A 5xx is not stored: the retry runs the handler again.
func TestMiddleware_ServerError_NotStored_RetryRunsAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		h, runs := failingFirst(ts.store, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "database down", http.StatusServiceUnavailable)
		}, http.StatusOK)
		wantStatus(t, call(h, "POST", "/x", "k", "b"), http.StatusServiceUnavailable)
		wantStatus(t, call(h, "POST", "/x", "k", "b"), http.StatusOK)
		w := call(h, "POST", "/x", "k", "b")
		wantStatus(t, w, http.StatusOK)
		if runs.Load() != 2 || w.Header().Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("want 2 runs and the 200 replayed, got %d runs, replayed %q", runs.Load(), w.Header().Get(idempotency.HeaderReplayed))
		}
	})
}

func TestMiddleware_PanickingHandler_ReleasesKey(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		h, runs := failingFirst(ts.store, func(http.ResponseWriter, *http.Request) { panic("boom") }, http.StatusNoContent)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("want the handler's panic to propagate")
				}
			}()
			call(h, "POST", "/x", "k", "b")
		}()
		wantStatus(t, call(h, "POST", "/x", "k", "b"), http.StatusNoContent)
		if n := runs.Load(); n != 2 {
			t.Fatalf("want 2 runs (the panic, then the retry), got %d", n)
		}
	})
}

// failingFirst returns s's middleware around a handler whose first run is first
// and whose later runs answer status, and the count of its runs.
func failingFirst(s idempotency.Store, first http.HandlerFunc, status int) (http.Handler, *atomic.Int64) {
	runs := new(atomic.Int64)
	return idempotency.Middleware(s, idempotency.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			first(w, r)
			return
		}
		w.WriteHeader(status)
	})), runs
}

func TestMiddleware_IdentityScopesKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		c := &counting{}
		h := idempotency.Middleware(ts.store, idempotency.Options{Identity: func(r *http.Request) string { return r.Header.Get("X-Client") }})(c)
		a := call(h, "POST", "/orders", "k", "x", "X-Client", "alice")
		b := call(h, "POST", "/orders", "k", "y", "X-Client", "bob")
		wantStatus(t, a, http.StatusCreated)
		wantStatus(t, b, http.StatusCreated) // not 422: bob's "k" is not alice's
		again := call(h, "POST", "/orders", "k", "x", "X-Client", "alice")
		if c.runs.Load() != 2 || again.Body.String() != a.Body.String() {
			t.Fatalf("want 2 runs and alice's response replayed, got %d runs, %q", c.runs.Load(), again.Body)
		}
	})
}

func TestMiddleware_BodyOverLimit_413(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		c := &counting{}
		h := idempotency.Middleware(ts.store, idempotency.Options{MaxBodyBytes: 16})(c)
		wantStatus(t, call(h, "POST", "/x", "k", strings.Repeat("a", 17)), http.StatusRequestEntityTooLarge)
		wantStatus(t, call(h, "POST", "/x", "k", strings.Repeat("a", 16)), http.StatusCreated)
		if c.runs.Load() != 1 {
			t.Fatalf("want 1 run, got %d", c.runs.Load())
		}
	})
}

// 16 concurrent duplicates of one request: the handler runs once; while it runs
// the other 15 get 409 with Retry-After; afterwards a retry gets the replay.
func TestMiddleware_ConcurrentDuplicates_HandlerRunsOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		var runs atomic.Int64
		release := make(chan struct{})
		h := idempotency.Middleware(ts.store, idempotency.Options{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			<-release
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "charged once")
		}))
		results := make(chan *httptest.ResponseRecorder, 16)
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- call(h, "POST", "/charge", "dup", "42 EUR")
			}()
		}
		var conflicts int
		for i := 0; i < 15; i++ {
			w := <-results
			wantStatus(t, w, http.StatusConflict)
			if w.Header().Get("Retry-After") == "" || errorCode(t, w) != "request_in_flight" {
				t.Fatalf("want Retry-After and code request_in_flight, got %v %s", w.Header(), w.Body)
			}
			conflicts++
		}
		close(release)
		wg.Wait()
		wantStatus(t, <-results, http.StatusCreated)
		replay := call(h, "POST", "/charge", "dup", "42 EUR")
		wantStatus(t, replay, http.StatusCreated)
		if runs.Load() != 1 || conflicts != 15 || !bytes.Equal(replay.Body.Bytes(), []byte("charged once")) {
			t.Fatalf("want 1 run, 15 conflicts, replay %q; got %d runs, %d conflicts, %q", "charged once", runs.Load(), conflicts, replay.Body)
		}
	})
}

// A first request that crashed (its record stays in flight) blocks retries with
// 409 until the lock timeout; then a retry takes the key over and runs.
func TestMiddleware_CrashedFirstRequest_RetryRunsAfterLockTimeout(t *testing.T) {
	eachStore(t, func(t *testing.T, ts testStore) {
		c := &counting{}
		h := idempotency.Middleware(ts.store, idempotency.Options{LockTimeout: 30 * time.Second})(c)
		// The crashed request: claimed the key, never completed.
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("pay"))
		if _, err := ts.store.Begin(r.Context(), idempotency.ScopedKey("", "k"), idempotency.Fingerprint(r, []byte("pay")), 30*time.Second, time.Hour); err != nil {
			t.Fatal(err)
		}
		w := call(h, "POST", "/orders", "k", "pay")
		wantStatus(t, w, http.StatusConflict)
		if ra := w.Header().Get("Retry-After"); ra != "30" {
			t.Fatalf("want Retry-After 30 (the lock's time left), got %q", ra)
		}
		ts.advance(t, 31*time.Second)
		wantStatus(t, call(h, "POST", "/orders", "k", "pay"), http.StatusCreated)
		if c.runs.Load() != 1 {
			t.Fatalf("want 1 run after the takeover, got %d", c.runs.Load())
		}
	})
}
