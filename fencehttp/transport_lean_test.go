package fencehttp_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// framingServer is a real fence server whose answers to the lock routes are
// sent in a framing its mode chooses, as proxies and other servers may: every
// answer the Client does not read itself must be read as net/http reads it,
// and a connection whose framing is in doubt never carries another request.
type framingServer struct {
	hs    *httptest.Server
	conns atomic.Int64
	mode  atomic.Value // string: see serve
}

func newFramingServer(t *testing.T, mode string) *framingServer {
	t.Helper()
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), KV: inmem.NewGuard()})
	if err != nil {
		t.Fatal(err)
	}
	fs := &framingServer{}
	fs.mode.Store(mode)
	h := s.Handler()
	fs.hs = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fs.serve(t, h, w, r)
	}))
	startCounting(t, fs.hs, &fs.conns)
	return fs
}

// startCounting starts hs, counting in conns the connections it accepts, and
// closes it when t ends.
func startCounting(t *testing.T, hs *httptest.Server, conns *atomic.Int64) {
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
}

// serve answers r as the fence server does, then sends the answer in the
// current mode: plain (as net/http sends it), split (the head with its
// Content-Length at once, the body 20ms later, so that the two come in
// separate reads), chunked (no Content-Length, the
// body in two flushed chunks), close (Connection: close), early-hints (a 103
// before the answer), big (an error answer of 100 KB: beyond the Client's own
// reading), or, over the hijacked connection, truncated (a Content-Length
// longer than the body, then a close) and cut-head (the head cut short, then a
// close).
func (fs *framingServer) serve(t *testing.T, h http.Handler, w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	mode := fs.mode.Load().(string)
	switch mode {
	case "plain":
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	case "split":
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		_, _ = w.Write(body)
	case "chunked":
		w.WriteHeader(rec.Code)
		half := len(body) / 2
		_, _ = w.Write(body[:half])
		w.(http.Flusher).Flush()
		_, _ = w.Write(body[half:])
	case "close":
		w.Header().Set("Connection", "close")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	case "early-hints":
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	case "big":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(strings.Repeat("overloaded ", 100<<10/11)))
	case "truncated", "cut-head":
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)+10) + "\r\n\r\n"
		if mode == "truncated" {
			_, _ = bw.WriteString(head)
			_, _ = bw.Write(body)
		} else {
			_, _ = bw.WriteString(head[:len(head)/2])
		}
		_ = bw.Flush()
	default:
		t.Errorf("unknown mode %q", mode)
	}
}

// seqPairs runs n acquire+release pairs of c on name and fails t on an error.
func seqPairs(t *testing.T, c *fencehttp.Client, name string, n int) {
	t.Helper()
	ctx := ctxFor(t)
	for i := range n {
		l, err := c.Acquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("pair %d: acquire: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("pair %d: release: %v", i, err)
		}
	}
}

// Answers in another framing than the server's usual one are read whole and
// right, and the connection is kept exactly when the framing allows it.
func TestClient_AnswerFraming_ReadAsNetHTTPReadsIt(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		wantConns int64 // for 5 pairs: 10 requests
	}{
		{"plain", 1},
		{"split", 1},
		{"chunked", 1},
		{"early-hints", 1},
		{"close", 10},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			fs := newFramingServer(t, tc.mode)
			c := mustClient(t, fs.hs.URL, nil)
			seqPairs(t, c, "framing", 5)
			if got := fs.conns.Load(); got != tc.wantConns {
				t.Fatalf("10 requests answered %s took %d connections, want %d", tc.mode, got, tc.wantConns)
			}
		})
	}
}

// An answer too large for the Client's own reading is read by net/http, whole:
// the error quotes its start, and the connection is kept.
func TestClient_AnswerFraming_BigBodyReadWhole(t *testing.T) {
	fs := newFramingServer(t, "big")
	c := mustClient(t, fs.hs.URL, nil)
	ctx := ctxFor(t)
	for i := range 3 {
		_, err := c.Acquire(ctx, "big", time.Minute)
		var se *fencehttp.ServerError
		if !errors.As(err, &se) || se.Status != http.StatusInternalServerError || !strings.Contains(err.Error(), "overloaded overloaded") {
			t.Fatalf("acquire %d: want a *ServerError 500 quoting the body, got %v", i, err)
		}
	}
	if got := fs.conns.Load(); got != 1 {
		t.Fatalf("3 big answers took %d connections, want 1", got)
	}
	fs.mode.Store("plain")
	seqPairs(t, c, "big-after", 2)
}

// An answer cut short (its body, or its head) fails its request as a server
// that cannot be reached (EOF), and its connection is never used again: the
// next request goes on a new one and succeeds.
func TestClient_AnswerCutShort_UnavailableAndConnectionDropped(t *testing.T) {
	for _, mode := range []string{"truncated", "cut-head"} {
		t.Run(mode, func(t *testing.T) {
			fs := newFramingServer(t, "plain")
			c := mustClient(t, fs.hs.URL, nil)
			seqPairs(t, c, "cut", 1)
			ctx := ctxFor(t)
			for i := range 3 {
				fs.mode.Store(mode)
				_, err := c.Acquire(ctx, fmt.Sprintf("cut-%d", i), time.Minute)
				if !errors.Is(err, fence.ErrUnavailable) || !strings.Contains(err.Error(), "EOF") {
					t.Fatalf("answer %s: want ErrUnavailable reading EOF, got %v", mode, err)
				}
				fs.mode.Store("plain")
				seqPairs(t, c, fmt.Sprintf("after-%d", i), 1)
			}
			// One connection for the first pair, then each cut answer closes
			// its connection and the pair after it opens the next one.
			if got := fs.conns.Load(); got != 4 {
				t.Fatalf("3 answers cut short took %d connections in all, want 4", got)
			}
		})
	}
}

// An auth token the lean path does not write itself (not printable ASCII) goes
// by net/http's Request.Write on the same direct transport, and is still
// accepted, and a wrong one still refused, on a kept connection.
func TestClient_AuthTokenNotASCII_SentByNetHTTP(t *testing.T) {
	const token = "s3cr\u00e9t"
	_, hs := newServer(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), AuthTokens: [][]byte{[]byte(token)}})
	c := mustClient(t, hs.URL, &fencehttp.ClientOptions{AuthToken: token})
	seqPairs(t, c, "auth", 3)
	bad := mustClient(t, hs.URL, &fencehttp.ClientOptions{AuthToken: "s3cr\u00e8t"})
	_, err := bad.Acquire(ctxFor(t), "auth", time.Minute)
	if !errors.Is(err, fencehttp.ErrUnauthorized) {
		t.Fatalf("acquire with a wrong token: want ErrUnauthorized, got %v", err)
	}
}

// The headers the Client reads (Fence-Token and Fence-Lock of a KV read) are
// the ones the server sent, whichever framing the answer came in, a body in a
// read of its own included (a body longer than the head: read into the buffer
// the head was in).
func TestClient_AnswerFraming_GetKeepsItsHeaders(t *testing.T) {
	value := strings.Repeat("v", 2000)
	for _, mode := range []string{"plain", "split", "chunked", "close"} {
		t.Run(mode, func(t *testing.T) {
			fs := newFramingServer(t, "plain")
			c := mustClient(t, fs.hs.URL, nil)
			ctx := ctxFor(t)
			l := mustAcquire(t, c, "kv/lock", time.Minute)
			if err := c.Put(ctx, "kv/key", []byte(value), l.Fence()); err != nil {
				t.Fatal(err)
			}
			fs.mode.Store(mode)
			for i := range 3 {
				item, err := c.Get(ctx, "kv/key")
				if err != nil {
					t.Fatalf("get %d: %v", i, err)
				}
				if string(item.Value) != value || item.Fence.Name != "kv/lock" || item.Fence.Token != l.Token() {
					t.Fatalf("get %d: want %d bytes of lock %q token %d, got %d of %q token %d",
						i, len(value), "kv/lock", l.Token(), len(item.Value), item.Fence.Name, item.Fence.Token)
				}
			}
		})
	}
}
