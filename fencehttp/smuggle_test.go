package fencehttp_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
)

// One request per request: the bytes of a request's body are never read as
// another request, on a wait or not. Each test sends, over a raw socket to a
// server served as fence serve serves it, a request whose body is a whole
// request that would acquire a lock, and wants one answer on the connection and
// that lock never granted.

// smuggledAcquire is a request that acquires name if it is ever read as one.
func smuggledAcquire(name string) string {
	return "POST /v1/locks/" + fencehttp.EscapeName(name) + "/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
}

// chunked frames body as one chunk and the last chunk.
func chunked(body string) string {
	return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// quiet is how long a connection must stay silent after its answer for a test
// to conclude no second answer comes: the replay of a body as a request is
// answered at once.
const quiet = 500 * time.Millisecond

// oneAnswer reads the first answer on br and fails if a second one follows
// within quiet of it. It returns the first answer and its body.
func oneAnswer(t *testing.T, br *bufio.Reader, conn interface{ SetReadDeadline(time.Time) error }) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the first answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("the first answer's body: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(quiet))
	if b, err := br.Peek(1); len(b) > 0 {
		more, _ := br.Peek(br.Buffered())
		line, _, _ := strings.Cut(string(more), "\r\n")
		t.Fatalf("after the answer %d %s: want nothing more on the connection, got a second answer %q (err %v)", resp.StatusCode, strings.TrimSpace(string(body)), line, err)
	}
	return resp, string(body)
}

// neverGranted fails unless the lock name on the server at base was never
// granted: not held, no token ever issued.
func neverGranted(t *testing.T, base, name string) {
	t.Helper()
	info, err := mustClient(t, base, nil).Inspect(ctxFor(t), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	if info.Held || info.LastToken != 0 {
		t.Fatalf("the lock %q named only inside a request's body: want never granted, got held=%v last_token=%d", name, info.Held, info.LastToken)
	}
}

// currentIndex returns the Fence-Index of the lock name at base.
func currentIndex(t *testing.T, base, name string) string {
	t.Helper()
	a := call(t, "GET", base+"/v1/locks/"+fencehttp.EscapeName(name), "", nil)
	if a.status != http.StatusOK || a.header.Get(fencehttp.HeaderIndex) == "" {
		t.Fatalf("GET %q: want 200 with a Fence-Index, got %d %s", name, a.status, a.raw)
	}
	return a.header.Get(fencehttp.HeaderIndex)
}

// The reproducer: a blocking query (index=0) with a body that is a whole
// request. It was answered, and then the body was answered as a request of its
// own and acquired "smuggled".
func TestServer_BodyOfBlockingQuery_IsNeverARequest(t *testing.T) {
	_, base := waitServer(t)
	body := smuggledAcquire("smuggled")
	c, br := rawRequest(t, base, fmt.Sprintf("GET /v1/locks/foo?index=0 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	resp, got := oneAnswer(t, br, c)
	if resp.StatusCode != http.StatusOK || !strings.Contains(got, `"name":"foo"`) {
		t.Fatalf("GET /v1/locks/foo?index=0 with a body: want 200 with the state of foo, got %d %s", resp.StatusCode, got)
	}
	neverGranted(t, base, "smuggled")
}

// The same request with the body chunked: the chunk's framing was read as a
// request line and answered 400, after the query's own answer.
func TestServer_ChunkedBodyOfBlockingQuery_IsNeverARequest(t *testing.T) {
	_, base := waitServer(t)
	c, br := rawRequest(t, base, "GET /v1/locks/foo?index=0 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+chunked(smuggledAcquire("smuggled")))
	if resp, got := oneAnswer(t, br, c); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/locks/foo?index=0 with a chunked body: want 200, got %d %s", resp.StatusCode, got)
	}
	neverGranted(t, base, "smuggled")
}

// The same request with a body over 64 KiB, the smuggled request first: the
// part of the body net/http had buffered was replayed (the acquire, then the
// padding answered 400 or 431).
func TestServer_BodyOver64KiBOfBlockingQuery_IsNeverARequest(t *testing.T) {
	_, base := waitServer(t)
	body := smuggledAcquire("smuggled")
	body += strings.Repeat("x", 70<<10-len(body))
	c, br := rawRequest(t, base, fmt.Sprintf("GET /v1/locks/foo?index=0 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	if resp, got := oneAnswer(t, br, c); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/locks/foo?index=0 with a %d-byte body: want 200, got %d %s", len(body), resp.StatusCode, got)
	}
	neverGranted(t, base, "smuggled")
}

// A long poll: a blocking query whose index is the lock's current one waits
// (wait_ms) before it answers, and its body, a whole request, is never answered
// as one, whether it has a length or is chunked.
func TestServer_BodyOfLongPoll_IsNeverARequest(t *testing.T) {
	for _, framing := range []string{"length", "chunked"} {
		t.Run(framing, func(t *testing.T) {
			_, base := waitServer(t)
			name, smuggled := uniq(t, "polled"), uniq(t, "smuggled")
			index := currentIndex(t, base, name)
			head := fmt.Sprintf("GET /v1/locks/%s?index=%s&wait_ms=300 HTTP/1.1\r\nHost: x\r\n", fencehttp.EscapeName(name), index)
			body := smuggledAcquire(smuggled)
			req := head + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
			if framing == "chunked" {
				req = head + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body)
			}
			start := time.Now()
			c, br := rawRequest(t, base, req)
			resp, got := oneAnswer(t, br, c)
			if resp.StatusCode != http.StatusOK || resp.Header.Get(fencehttp.HeaderIndex) != index {
				t.Fatalf("long poll with a body: want 200 with the same index %s after its wait, got %d index %q %s", index, resp.StatusCode, resp.Header.Get(fencehttp.HeaderIndex), got)
			}
			if waited := time.Since(start); waited < 300*time.Millisecond {
				t.Fatalf("long poll with a body: answered after %v, before its wait_ms of 300", waited)
			}
			neverGranted(t, base, smuggled)
		})
	}
}

// A waiting acquire whose body holds its JSON and then a whole request: the
// body is the request's, refused 400 as a JSON body with trailing data, never a
// second request, whether it has a length or is chunked.
func TestServer_BodyOfWaitingAcquire_IsNeverARequest(t *testing.T) {
	for _, framing := range []string{"length", "chunked"} {
		t.Run(framing, func(t *testing.T) {
			_, base := waitServer(t)
			name, smuggled := uniq(t, "held"), uniq(t, "smuggled")
			hc := &http.Client{Timeout: 10 * time.Second}
			if code, v := postJSON(t, hc, base+"/v1/locks/"+fencehttp.EscapeName(name)+"/acquire", `{"ttl_ms":60000}`); code != http.StatusOK {
				t.Fatalf("acquire %q: want 200, got %d %v", name, code, v)
			}
			head := fmt.Sprintf("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", fencehttp.EscapeName(name))
			body := `{"ttl_ms":60000,"wait_ms":300}` + smuggledAcquire(smuggled)
			req := head + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
			if framing == "chunked" {
				req = head + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body)
			}
			c, br := rawRequest(t, base, req)
			resp, got := oneAnswer(t, br, c)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(got, `"invalid"`) {
				t.Fatalf("waiting acquire with a request after its JSON: want 400 invalid, got %d %s", resp.StatusCode, got)
			}
			neverGranted(t, base, smuggled)
		})
	}
}

// Pipelining is not smuggling: a request sent right behind a waiting acquire
// (its body read to its end, its wait parked) or a long poll, on the same
// connection, gets its own answer after theirs.
func TestServer_PipelinedRequestAfterWaits_GetsItsOwnAnswer(t *testing.T) {
	s, base := waitServer(t)
	name := uniq(t, "lock")
	esc := fencehttp.EscapeName(name)
	hc := &http.Client{Timeout: 10 * time.Second}
	_, held := postJSON(t, hc, base+"/v1/locks/"+esc+"/acquire", `{"ttl_ms":60000}`)
	index := currentIndex(t, base, name)
	waits := gauge(t, s, "fence_waits_total")
	for _, framing := range []string{"length", "chunked"} {
		body := `{"ttl_ms":60000,"wait_ms":20000}`
		req := acquireRequest(esc, body, "")
		if framing == "chunked" {
			req = fmt.Sprintf("POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%s", esc, chunked(body))
		}
		poll := fmt.Sprintf("GET /v1/locks/%s?index=%s&wait_ms=20000 HTTP/1.1\r\nHost: x\r\n\r\n", esc, index)
		next := "GET /v1/locks/" + esc + " HTTP/1.1\r\nHost: x\r\n\r\n"
		c, br := rawRequest(t, base, req+next)
		waitUntil(t, "the acquire waits", func() bool { return gauge(t, s, "fence_waits_total") > waits })
		waits = gauge(t, s, "fence_waits_total")
		pc, pbr := rawRequest(t, base, poll+next)
		waitGauge(t, s, 1)
		postJSON(t, hc, base+"/v1/locks/"+esc+"/release", fmt.Sprintf(`{"lease":%q}`, held["lease"]))
		for _, w := range []struct {
			what string
			br   *bufio.Reader
		}{{"waiting acquire (" + framing + ")", br}, {"long poll", pbr}} {
			first, err := http.ReadResponse(w.br, nil)
			if err != nil {
				t.Fatalf("%s: its answer: %v", w.what, err)
			}
			b, _ := io.ReadAll(first.Body)
			first.Body.Close()
			if first.StatusCode != http.StatusOK {
				t.Fatalf("%s after the release: want 200, got %d %s", w.what, first.StatusCode, b)
			}
			if w.what == "long poll" {
				continue
			}
			held = nil
			if err := json.Unmarshal(b, &held); err != nil {
				t.Fatalf("%s: %v", w.what, err)
			}
		}
		// Behind the acquire, the lock is held by it; behind the long poll, which
		// answered the release, it may be held yet or not.
		if resp, got := oneAnswer(t, br, c); resp.StatusCode != http.StatusOK || !strings.Contains(got, `"held":true`) {
			t.Fatalf("the request pipelined behind a waiting acquire (%s): want 200 with the lock held, got %d %s", framing, resp.StatusCode, got)
		}
		if resp, got := oneAnswer(t, pbr, pc); resp.StatusCode != http.StatusOK || !strings.Contains(got, `"last_token":`) {
			t.Fatalf("the request pipelined behind a long poll: want 200 with the lock's state, got %d %s", resp.StatusCode, got)
		}
		index = currentIndex(t, base, name)
	}
}
