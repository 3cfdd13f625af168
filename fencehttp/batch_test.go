package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// batchResult is one slot of a batch's answer.
type batchResult struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// postBatch sends ops (a JSON array) to /v1/batch and returns the whole answer
// and, for a 200, its slots.
func postBatch(t *testing.T, url, ops string, header map[string]string) (answer, []batchResult) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t), "POST", url+"/v1/batch", strings.NewReader(ops))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/batch: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST /v1/batch: %v", err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(data)}
	if a.status != http.StatusOK {
		_ = json.Unmarshal(data, &a.json)
		return a, nil
	}
	var res []batchResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("batch answer %s: %v", data, err)
	}
	return a, res
}

// compact is a JSON body without the white space around it.
func compact(s string) string { return strings.TrimSpace(s) }

// Item: each operation of a batch is answered exactly as its single route
// answers it (status and body byte for byte), in its slot: grants, a held lock,
// bad input of every kind, a lease that is gone, and one bad operation never
// fails the others.
func TestBatch_Contract_EachOpAsItsSingleRoute(t *testing.T) {
	_, hs, _ := newBoltServer(t, fencehttp.Config{})
	url := hs.URL
	held, free := uniq(t, "held"), uniq(t, "free")
	one := call(t, "POST", url+"/v1/locks/"+fencehttp.EscapeName(held)+"/acquire", `{"ttl_ms":60000}`, nil)
	if one.status != 200 {
		t.Fatalf("acquire %q: want 200, got %d %s", held, one.status, one.raw)
	}
	lease := one.json["lease"].(string)
	gone := driver.NewLeaseID()
	jname := func(n string) string { q, _ := json.Marshal(n); return string(q) }
	// Each case: a batch operation and the single request that it stands for,
	// sent after the batch, on state the batch left as the single one finds it.
	cases := []struct {
		what   string
		op     string // the element of the batch
		single [3]string
		status int
	}{
		{"acquire, held", `{"op":"acquire","name":` + jname(held) + `,"ttl_ms":1000}`, [3]string{held, "acquire", `{"ttl_ms":1000}`}, 409},
		{"acquire, ttl 0", `{"op":"acquire","name":"x","ttl_ms":0}`, [3]string{"x", "acquire", `{"ttl_ms":0}`}, 400},
		{"acquire, unknown field", `{"op":"acquire","name":"x","ttl":5}`, [3]string{"x", "acquire", `{"ttl":5}`}, 400},
		{"acquire, wait_ms negative", `{"name":"x","wait_ms":-1,"op":"acquire"}`, [3]string{"x", "acquire", `{"wait_ms":-1}`}, 400},
		{"acquire, owner with a newline", `{"op":"acquire","name":"x","owner":"a\nb"}`, [3]string{"x", "acquire", `{"owner":"a\nb"}`}, 400},
		{"acquire, shared semaphore", `{"op":"acquire","name":"x","limit":2,"shared":true}`, [3]string{"x", "acquire", `{"limit":2,"shared":true}`}, 400},
		{"renew", `{"op":"renew","name":` + jname(held) + `,"lease":"` + lease + `","ttl_ms":60000}`, [3]string{held, "renew", `{"lease":"` + lease + `","ttl_ms":60000}`}, 200},
		{"renew, lease with a space", `{"op":"renew","name":"x","lease":"a b"}`, [3]string{"x", "renew", `{"lease":"a b"}`}, 400},
		{"renew, no fields", `{"op":"renew","name":"x"}`, [3]string{"x", "renew", `{}`}, 400},
		{"renew, not held", `{"op":"renew","name":"x","lease":"` + gone + `"}`, [3]string{"x", "renew", `{"lease":"` + gone + `"}`}, 410},
		{"release, not held", `{"op":"release","name":"x","lease":"` + gone + `"}`, [3]string{"x", "release", `{"lease":"` + gone + `"}`}, 410},
		{"release, empty lease", `{"op":"release","name":"x","lease":""}`, [3]string{"x", "release", `{"lease":""}`}, 400},
		{"release, lease a number", `{"op":"release","name":"x","lease":5}`, [3]string{"x", "release", `{"lease":5}`}, 400},
	}
	ops := make([]string, 0, len(cases)+8)
	for _, c := range cases {
		ops = append(ops, c.op)
	}
	// Operations that have no single route to compare with, each refused in its
	// slot, and a grant among them.
	extra := []struct {
		what, op string
		status   int
		field    string
	}{
		{"acquire, free", `{"op":"acquire","name":` + jname(free) + `,"ttl_ms":60000,"owner":"w1"}`, 200, ""},
		{"a waiting acquire", `{"op":"acquire","name":"x","wait_ms":5}`, 400, "wait_ms"},
		{"a waiting acquire, other case", `{"op":"acquire","name":"x","WAIT_MS":5}`, 400, "wait_ms"},
		{"unknown op", `{"op":"revoke","name":"x"}`, 400, "op"},
		{"no op", `{"name":"x","ttl_ms":5}`, 400, "op"},
		{"no name", `{"op":"acquire"}`, 400, "name"},
		{"bad name", `{"op":"acquire","name":""}`, 400, "name"},
		{"name twice", `{"op":"acquire","name":"x","name":"y"}`, 400, "name"},
		{"not an object", `[1,2]`, 400, "op"},
	}
	for _, e := range extra {
		ops = append(ops, e.op)
	}
	a, res := postBatch(t, url, "["+strings.Join(ops, ",")+"]", nil)
	if a.status != 200 || len(res) != len(ops) {
		t.Fatalf("batch of %d: want 200 with %d results, got %d %s", len(ops), len(ops), a.status, a.raw)
	}
	for i, c := range cases {
		got := res[i]
		single := call(t, "POST", url+"/v1/locks/"+fencehttp.EscapeName(c.single[0])+"/"+c.single[1], c.single[2], nil)
		if got.Status != c.status || single.status != c.status {
			t.Errorf("%s: want %d in the batch and alone, got %d %s and %d %s", c.what, c.status, got.Status, got.Body, single.status, single.raw)
			continue
		}
		if c.status == 409 {
			// expires_in_ms moves between the two; the rest must agree.
			var b, s map[string]any
			_ = json.Unmarshal(got.Body, &b)
			_ = json.Unmarshal([]byte(single.raw), &s)
			delete(b, "expires_in_ms")
			delete(s, "expires_in_ms")
			delete(b, "error")
			delete(s, "error")
			if fmt.Sprint(b) != fmt.Sprint(s) {
				t.Errorf("%s: want the single route's body %s, got %s", c.what, single.raw, got.Body)
			}
			continue
		}
		if string(got.Body) != compact(single.raw) {
			t.Errorf("%s: want the single route's body %s, got %s", c.what, compact(single.raw), got.Body)
		}
	}
	for j, e := range extra {
		got := res[len(cases)+j]
		var body map[string]any
		_ = json.Unmarshal(got.Body, &body)
		if got.Status != e.status || e.field != "" && (body["code"] != "invalid" || body["field"] != e.field) {
			t.Errorf("%s: want %d (field %q), got %d %s", e.what, e.status, e.field, got.Status, got.Body)
		}
		if e.status == 200 {
			if body["name"] != free || body["ttl_ms"] != float64(60000) || body["lease"] == "" {
				t.Errorf("%s: want the lease of %q, got %s", e.what, free, got.Body)
			}
			// The grant is real: the lock is held, by the owner named.
			if st := call(t, "GET", url+"/v1/locks/"+fencehttp.EscapeName(free), "", nil); st.json["held"] != true || st.json["owner"] != "w1" {
				t.Errorf("%s: want %q held by w1 after the batch, got %s", e.what, free, st.raw)
			}
		}
	}
	// The operations count on their routes' metrics, and the batch on its own.
	m := call(t, "GET", url+"/metrics", "", nil)
	for _, want := range []string{`fence_http_requests_total{code="200",route="batch"} 1`, `fence_http_requests_total{code="410",route="locks/release"} 2`} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("metrics: want %s, got:\n%s", want, grepLines(m.raw, "fence_http_requests_total"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Item: what fails a batch whole: a body that is not a JSON array of 1 to
// MaxBatchOps operations (400), one over the body limit (413), a method other
// than POST (405).
func TestBatch_Contract_Limits(t *testing.T) {
	_, hs, _ := newBoltServer(t, fencehttp.Config{})
	op := `{"op":"release","name":"x","lease":"` + driver.NewLeaseID() + `"}`
	many := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat(op+",", n), ",") + "]" }
	for _, c := range []struct {
		what, body string
		status     int
		code       string
	}{
		{"MaxBatchOps operations", many(fencehttp.MaxBatchOps), 200, ""},
		{"one more than MaxBatchOps", many(fencehttp.MaxBatchOps + 1), 400, "invalid"},
		{"empty array", `[]`, 400, "invalid"},
		{"an object", op, 400, "invalid"},
		{"not JSON", `[{"op":`, 400, "invalid"},
		{"trailing data", many(1) + `x`, 400, "invalid"},
		{"over the body limit", "[" + op + strings.Repeat(" ", fencehttp.DefaultMaxBodyBytes) + "]", 413, "too_large"},
	} {
		a, _ := postBatch(t, hs.URL, c.body, nil)
		if a.status != c.status || c.code != "" && a.json["code"] != c.code {
			t.Errorf("%s: want %d %q, got %d %.300s", c.what, c.status, c.code, a.status, a.raw)
		}
		if c.status == 200 {
			var res []batchResult
			if err := json.Unmarshal([]byte(a.raw), &res); err != nil || len(res) != fencehttp.MaxBatchOps || res[0].Status != 410 {
				t.Errorf("%s: want %d results of 410, got %.300s", c.what, fencehttp.MaxBatchOps, a.raw)
			}
		}
	}
	if a := call(t, "GET", hs.URL+"/v1/batch", "", nil); a.status != 405 || a.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/batch: want 405 with Allow: POST, got %d %q %s", a.status, a.header.Get("Allow"), a.raw)
	}
}

// Item: a scoped token reaches through a batch only the names and rights it
// has: each operation is checked as its single route is (403 in its slot,
// worded the same), the others run; without a token the batch is 401.
func TestBatch_Contract_Scope(t *testing.T) {
	url := scopedServer(t) // worker: lock,write on a and b/*; reader: read on a*
	ops := `[{"op":"acquire","name":"b/1","ttl_ms":60000},{"op":"acquire","name":"c","ttl_ms":60000},{"op":"acquire","name":"a","ttl_ms":60000}]`
	_, res := postBatch(t, url, ops, bearer("worker"))
	if len(res) != 3 || res[0].Status != 200 || res[1].Status != 403 || res[2].Status != 200 {
		t.Fatalf("worker's batch on b/1, c, a: want 200, 403, 200, got %+v", res)
	}
	single := call(t, "POST", url+"/v1/locks/c/acquire", `{"ttl_ms":60000}`, bearer("worker"))
	if string(res[1].Body) != compact(single.raw) {
		t.Errorf("403 in a batch: want the single route's %s, got %s", compact(single.raw), res[1].Body)
	}
	// read may not hold, even on its names.
	_, res = postBatch(t, url, `[{"op":"acquire","name":"ab","ttl_ms":1000},{"op":"release","name":"a","lease":"`+driver.NewLeaseID()+`"}]`, bearer("reader"))
	if len(res) != 2 || res[0].Status != 403 || res[1].Status != 403 {
		t.Errorf("reader's batch: want 403, 403, got %+v", res)
	}
	if a, _ := postBatch(t, url, ops, nil); a.status != 401 || a.json["code"] != "unauthorized" {
		t.Errorf("batch without a token: want 401, got %d %s", a.status, a.raw)
	}
	if st := call(t, "GET", url+"/v1/locks/c", "", bearer("admin")); st.json["held"] != false {
		t.Errorf("the lock c after a refused batch operation: want it free, got %s", st.raw)
	}
}

// batchCount is the number of 200 answers to /v1/batch that url has given.
func batchCount(t *testing.T, url string) int {
	t.Helper()
	m := call(t, "GET", url+"/metrics", "", nil)
	re := regexp.MustCompile(`fence_http_requests_total\{code="200",route="batch"\} (\d+)`)
	if s := re.FindStringSubmatch(m.raw); s != nil {
		n, _ := strconv.Atoi(s[1])
		return n
	}
	return 0
}

// pairs runs n goroutines sharing c, each acquiring and releasing its own name
// rounds times (renewing each lease once), and checks every grant: tokens rise
// per name, each lease is renewed and released by its own id.
func pairs(t *testing.T, c *fencehttp.Client, n, rounds int) {
	t.Helper()
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			name := uniq(t, fmt.Sprintf("g%d", g))
			var last fence.Token
			for range rounds {
				l, err := c.Acquire(ctx, name, time.Minute)
				if err != nil {
					errs <- fmt.Errorf("acquire %q: %w", name, err)
					return
				}
				if l.Token() <= last {
					errs <- fmt.Errorf("acquire %q: token %d after %d", name, l.Token(), last)
					return
				}
				last = l.Token()
				if err := c.Renew(ctx, name, l.ID(), time.Minute); err != nil {
					errs <- fmt.Errorf("renew %q: %w", name, err)
					return
				}
				if err := l.Release(ctx); err != nil {
					errs <- fmt.Errorf("release %q: %w", name, err)
					return
				}
				// Released: the lease is gone, and a second release says so.
				if err := c.Release(ctx, name, l.ID()); !errors.Is(err, fence.ErrNotHeld) {
					errs <- fmt.Errorf("release %q again: want ErrNotHeld, got %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Item: goroutines sharing one Client have their lock operations batched
// (the server answers batches), and every call gets its own answer: tokens
// rise, leases renew and release by their own ids.
func TestClient_Batch_ConcurrentGoroutines(t *testing.T) {
	_, hs, _ := newBoltServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	pairs(t, c, 16, 50)
	if n := batchCount(t, hs.URL); n == 0 {
		t.Errorf("16 goroutines sharing a client: want some of their calls batched, got no batch at the server")
	}
}

// Item: against a server without /v1/batch (older than this client: 404), the
// Client's calls go as single requests and all succeed.
func TestClient_Batch_FallbackToSingleRequests(t *testing.T) {
	for _, status := range []int{404, 405} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			s, _ := newServer(t, fencehttp.Config{})
			var refused atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/batch" {
					refused.Add(1)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					_, _ = w.Write([]byte(`{"error":"no such route: POST /v1/batch","code":"not_found"}`))
					return
				}
				s.Handler().ServeHTTP(w, r)
			}))
			t.Cleanup(hs.Close)
			c := mustClient(t, hs.URL, nil)
			pairs(t, c, 16, 30)
			// Tried (16 goroutines queue), and given up at once: at most one
			// batch per flight was in the air when the first was refused.
			if n := refused.Load(); n < 1 || n > 2 {
				t.Errorf("batches sent to a server without /v1/batch: want 1 or 2 (one per flight), got %d", n)
			}
		})
	}
}

// gate holds the requests of one route until opened, and says when one arrives.
type gate struct {
	route   string
	arrived chan struct{}
	open    chan struct{}
}

func newGate(route string) *gate {
	return &gate{route: route, arrived: make(chan struct{}, 64), open: make(chan struct{})}
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, g.route) {
			g.arrived <- struct{}{}
			<-g.open
		}
		h.ServeHTTP(w, r)
	})
}

// Item: a call whose context ends while it is queued returns at once with the
// context's error; one whose context ends while its batch is in the air returns
// too, and the grant the batch then brings it is released, not left held until
// its TTL.
func TestClient_Batch_ContextEnds(t *testing.T) {
	s, _ := newServer(t, fencehttp.Config{})
	singles, batches := newGate("/acquire"), newGate("/v1/batch")
	hs := httptest.NewServer(batches.wrap(singles.wrap(s.Handler())))
	t.Cleanup(hs.Close)
	c := mustClient(t, hs.URL, nil)
	ctx := ctxFor(t)
	// Two acquires in the air (every flight), held at the server.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			if _, err := c.Acquire(ctx, uniq(t, fmt.Sprintf("flight%d", i)), time.Minute); err != nil {
				t.Errorf("acquire in flight: %v", err)
			}
		})
		<-singles.arrived
	}
	// Queued: its context ends, it returns at once with the context's error.
	qctx, qcancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() {
		_, err := c.Acquire(qctx, uniq(t, "queued"), time.Minute)
		queued <- err
	}()
	// Two more queued, for the batch that will be in the air.
	lost, kept := uniq(t, "lost"), uniq(t, "kept")
	lctx, lcancel := context.WithCancel(ctx)
	lostErr, keptErr := make(chan error, 1), make(chan error, 1)
	go func() { _, err := c.Acquire(lctx, lost, time.Minute); lostErr <- err }()
	go func() { _, err := c.Acquire(ctx, kept, time.Minute); keptErr <- err }()
	// The flights are all taken: all three queue. The first gives up.
	waitQueued(t, c, 3)
	qcancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued acquire whose context ended: want context.Canceled, got %v", err)
	}
	close(singles.open) // the flights land, and send the queue in one batch
	<-batches.arrived
	lcancel() // the batch is in the air: this call gives up
	if err := <-lostErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire whose context ended with its batch in the air: want context.Canceled, got %v", err)
	}
	close(batches.open)
	if err := <-keptErr; err != nil {
		t.Fatalf("the other acquire of the batch: %v", err)
	}
	wg.Wait()
	// The grant of the call that gave up is released by the Client.
	for i := 0; ; i++ {
		info, err := c.Inspect(ctx, lost)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if i == 500 {
			t.Fatalf("the grant of an acquire that gave up in the air: want it released, still held: %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if info, _ := c.Inspect(ctx, kept); !info.Held {
		t.Errorf("the acquire that kept waiting: want its lock held, got %+v", info)
	}
}

// waitQueued waits until n of c's calls are queued for a batch.
func waitQueued(t *testing.T, c *fencehttp.Client, n int) {
	t.Helper()
	for i := 0; fencehttp.BatchQueued(c) < n; i++ {
		if i == 5000 {
			t.Fatalf("want %d calls queued, got %d", n, fencehttp.BatchQueued(c))
		}
		time.Sleep(time.Millisecond)
	}
}

// Item: an operation whose store panics is answered 500 "internal" in its slot;
// the other operations of the batch are answered as ever.
func TestBatch_Contract_PanicFailsOnlyItsOperation(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{Locker: panicLocker{inmem.NewLocker(inmem.Options{})}})
	_, res := postBatch(t, hs.URL, `[{"op":"acquire","name":"x"},{"op":"release","name":"x","lease":"`+driver.NewLeaseID()+`"}]`, nil)
	if len(res) != 2 || res[0].Status != 500 || res[1].Status != 410 {
		t.Fatalf("batch of an acquire whose store panics and a release: want 500, 410, got %+v", res)
	}
	var body map[string]any
	if err := json.Unmarshal(res[0].Body, &body); err != nil || body["code"] != "internal" {
		t.Errorf("the panicking operation: want code internal, got %s", res[0].Body)
	}
}
