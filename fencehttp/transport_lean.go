package fencehttp

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The lean path of the direct transport. At the rate of lock pairs, building an
// *http.Request (its URL parsed again, its header map), Request.Write and
// ReadResponse (textproto's header map, the body's reader stack) cost the client
// more CPU than the server's handler takes for the request. The Client's own
// requests are few and plain, so the lean path writes them itself, from a head
// made once per Client (Host, User-Agent, Authorization) and a buffer kept per
// connection, and reads the answers it expects itself: "HTTP/1.1 SSS", a
// Content-Length, a small body. Anything else (1xx, 204, 304, chunked or
// unframed bodies, Connection or Upgrade headers, a bare LF, a head larger than
// the connection's buffer, a body over leanMaxBody, any byte it does not
// expect) is read by net/http's ReadResponse from the same first byte, since the
// lean parser only peeks until it has the whole head: the answer is then read
// exactly as before. The connection is checked before reuse (get), and kept only
// after an answer whose framing was read to its end.
//
// Measured by BenchmarkClient_AcquireRelease (server in another process, 2
// cores shared with other work, old and new interleaved, medians of 5): per
// acquire+release pair the client allocates 28 objects (1.4 KB) instead of 104
// (7.2 KB) and spends about half the user CPU (48 us instead of 67 us at one
// client); its system calls (write, read, the idle check's peek) are as many as
// before and now most of its CPU. At 16 clients of their own, pairs/s rose
// about 1.2x within each round.

// leanMaxBody is the largest body the lean path reads into a buffer of its
// size; a larger one goes to ReadResponse (and io.ReadAll), which does not trust
// a length it has not read.
const leanMaxBody = 64 << 10

// leanMaxLines bounds the header lines of an answer the lean path reads.
const leanMaxLines = 64

// headState is what parseHead made of the bytes of an answer so far.
type headState int

const (
	headDone  headState = iota // a complete head the lean path reads
	headMore                   // complete lines it reads, but no end yet
	headOther                  // an answer for ReadResponse
)

// answerHead is the part of an answer's head the Client reads.
type answerHead struct {
	status int
	length int // Content-Length
	// The first values of Fence-Index, Fence-Token and Fence-Lock, nil if absent.
	index, token, lock []byte
}

// parseHead reads the head of an answer at the start of buf: the status line
// "HTTP/1.1 SSS[ reason]" of a final status other than 204 and 304, and header
// lines "Key: value" ended by CRLF, among them exactly one Content-Length of at
// most leanMaxBody, and no Transfer-Encoding, Connection, Upgrade or Trailer;
// then an empty line. It returns headDone with the head and its length in
// bytes, headMore if buf holds only complete lines of such a head so far (and
// fewer than len(buf) may grow to: see readHead), or headOther for anything
// else, including a byte it does not expect anywhere in the head.
func parseHead(buf []byte) (answerHead, int, headState) {
	var h answerHead
	line, next, st := headLine(buf, 0)
	if st != headDone {
		return h, 0, st
	}
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || string(line[:len(proto)]) != proto || (len(line) > len(proto)+3 && line[len(proto)+3] != ' ') {
		return h, 0, headOther
	}
	for _, c := range line[len(proto) : len(proto)+3] {
		if c < '0' || c > '9' {
			return h, 0, headOther
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 200 || h.status == http.StatusNoContent || h.status == http.StatusNotModified {
		return h, 0, headOther
	}
	h.length = -1
	for n := 0; ; n++ {
		if n == leanMaxLines {
			return h, 0, headOther
		}
		line, next, st = headLine(buf, next)
		if st != headDone {
			return h, 0, st
		}
		if len(line) == 0 {
			if h.length < 0 {
				return h, 0, headOther // no length: read to the close, or chunked
			}
			return h, next, headDone
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return h, 0, headOther
		}
		key := line[:colon]
		for _, c := range key {
			if !isTokenByte(c) {
				return h, 0, headOther
			}
		}
		value := line[colon+1:]
		for len(value) > 0 && (value[0] == ' ' || value[0] == '\t') {
			value = value[1:]
		}
		if len(value) > 0 && (value[len(value)-1] == ' ' || value[len(value)-1] == '\t') {
			return h, 0, headOther
		}
		switch {
		case asciiEqualFold(key, "Content-Length"):
			if h.length >= 0 || len(value) == 0 || len(value) > 9 {
				return h, 0, headOther
			}
			h.length = 0
			for _, c := range value {
				if c < '0' || c > '9' {
					return h, 0, headOther
				}
				h.length = h.length*10 + int(c-'0')
			}
			if h.length > leanMaxBody {
				return h, 0, headOther
			}
		case asciiEqualFold(key, "Transfer-Encoding"), asciiEqualFold(key, "Connection"),
			asciiEqualFold(key, "Upgrade"), asciiEqualFold(key, "Trailer"):
			return h, 0, headOther
		case asciiEqualFold(key, HeaderIndex):
			if h.index != nil {
				return h, 0, headOther
			}
			h.index = value[:len(value):len(value)]
		case asciiEqualFold(key, HeaderToken):
			if h.token != nil {
				return h, 0, headOther
			}
			h.token = value[:len(value):len(value)]
		case asciiEqualFold(key, HeaderLock):
			if h.lock != nil {
				return h, 0, headOther
			}
			h.lock = value[:len(value):len(value)]
		}
	}
}

// headLine returns the line of buf at i without its CRLF, and the index after
// it: headMore if no LF follows i, headOther for a bare LF or a control byte
// (other than a tab) in the line.
func headLine(buf []byte, i int) ([]byte, int, headState) {
	for j := i; j < len(buf); j++ {
		switch c := buf[j]; {
		case c == '\n':
			if j == i || buf[j-1] != '\r' {
				return nil, 0, headOther
			}
			return buf[i : j-1], j + 1, headDone
		case c == '\r':
			if j+1 < len(buf) && buf[j+1] != '\n' {
				return nil, 0, headOther
			}
		case c == 0x7f || (c < 0x20 && c != '\t'):
			return nil, 0, headOther
		}
	}
	return nil, 0, headMore
}

// isTokenByte reports whether c may be in a header's name (RFC 9110's tchar).
func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// asciiEqualFold reports whether b is s, s being ASCII, with ASCII letters of
// either case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lowerASCII(b[i]) != lowerASCII(s[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// leanRequest is a request of the lean path: its target is the Client's base
// path and path, its header the Client's head and header.
type leanRequest struct {
	method, path string
	header       http.Header // besides Host, User-Agent, Authorization and Content-Length
	body         []byte      // nil: none (a GET); otherwise sent with its Content-Length, even 0
}

// leanHead is the part of every request of a Client that does not change.
type leanHead struct {
	addr     string // host:port to dial
	basePath string // the escaped path of the base URL, without a trailing slash
	lines    []byte // "Host: ...\r\nUser-Agent: ...\r\n[Authorization: ...\r\n]"
}

// newLeanHead returns the head of the requests of a Client of the base URL u
// with the auth token auth, or nil if u (its host, its path) or auth is not
// written exactly as net/http would write them: those Clients take net/http's
// path.
func newLeanHead(u *url.URL, auth string) *leanHead {
	if u.Scheme != "http" || !canCheckIdle || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil
	}
	for i := range len(u.Host) {
		c := u.Host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-:[]", c) >= 0) {
			return nil // an IPv6 zone, or bytes net/http would clean or refuse
		}
	}
	base := strings.TrimSuffix(u.EscapedPath(), "/")
	if !leanSafe(base) || strings.ContainsAny(base, " ?#") || !leanSafe(auth) {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	lines := "Host: " + u.Host + "\r\nUser-Agent: Go-http-client/1.1\r\n"
	if auth != "" {
		lines += "Authorization: Bearer " + auth + "\r\n"
	}
	return &leanHead{addr: net.JoinHostPort(u.Hostname(), port), basePath: base, lines: []byte(lines)}
}

// append appends r as net/http's Request.Write would send it.
func (lh *leanHead) append(dst []byte, r *leanRequest) []byte {
	dst = append(dst, r.method...)
	dst = append(dst, ' ')
	dst = append(dst, lh.basePath...)
	dst = append(dst, r.path...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	dst = append(dst, lh.lines...)
	if r.body != nil || r.method != http.MethodGet {
		dst = strconv.AppendInt(append(dst, "Content-Length: "...), int64(len(r.body)), 10)
		dst = append(dst, "\r\n"...)
	}
	for k, vs := range r.header {
		for _, v := range vs {
			dst = append(append(append(append(dst, k...), ": "...), v...), "\r\n"...)
		}
	}
	dst = append(dst, "\r\n"...)
	return append(dst, r.body...)
}

// leanSafe reports whether s may be written in a request head as it is:
// printable ASCII (and tabs), so it cannot end a line or split one. What is
// not goes by net/http, which sanitizes it.
func leanSafe(s string) bool {
	for i := range len(s) {
		if c := s[i]; c == 0x7f || c >= 0x80 || (c < 0x20 && c != '\t') {
			return false
		}
	}
	return true
}

// leanHeaderSafe reports whether every name and value of h is leanSafe, and
// no name is one the lean path writes itself.
func leanHeaderSafe(h http.Header) bool {
	for k, vs := range h {
		if k == "" || !leanSafe(k) || http.CanonicalHeaderKey(k) != k {
			return false
		}
		switch k {
		case "Host", "User-Agent", "Authorization", "Content-Length", "Transfer-Encoding", "Connection":
			return false
		}
		for _, v := range vs {
			if !leanSafe(v) {
				return false
			}
		}
	}
	return true
}

// send sends r to lh.addr on a connection of t and reads its whole answer (at
// most maxResponseBytes of its body, as do reads one). Deadlines, the
// context's end and the reuse of connections are as in roundTrip; so are its
// errors.
func (t *directTransport) send(ctx context.Context, deadline time.Time, lh *leanHead, r *leanRequest) (*response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dc, err := t.get(ctx, lh.addr)
	if err != nil {
		return nil, err
	}
	stop := dc.arm(ctx, deadline)
	fail := func(err error) (*response, error) { return nil, dc.abort(ctx, stop, err) }
	dc.wbuf = lh.append(dc.wbuf[:0], r)
	if _, err := dc.c.Write(dc.wbuf); err != nil {
		return fail(err)
	}
	if cap(dc.wbuf) > 4*leanMaxBody {
		dc.wbuf = nil // a large request's buffer is not kept for the small ones
	}
	h, lean, err := dc.readHead()
	if err != nil {
		return fail(err)
	}
	if !lean {
		return t.readOther(ctx, dc, lh.addr, stop)
	}
	// The head's values are copied before the body is read: they are slices of
	// dc.br's buffer, which reading the rest of the body overwrites.
	resp := &response{status: h.status}
	for _, f := range [...]struct {
		key   string
		value []byte
	}{{HeaderIndex, h.index}, {HeaderToken, h.token}, {HeaderLock, h.lock}} {
		if f.value != nil {
			if resp.header == nil {
				resp.header = make(http.Header, 1)
			}
			resp.header[f.key] = []string{string(f.value)}
		}
	}
	resp.body = make([]byte, h.length)
	if _, err := io.ReadFull(dc.br, resp.body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fail(err)
	}
	// As directBody.Close: stop reports false if the context's deadline-setting
	// has run (or is running), and the connection's deadline is not ours to clear.
	if !stop() || dc.c.SetDeadline(time.Time{}) != nil {
		dc.c.Close()
	} else {
		t.put(lh.addr, dc)
	}
	return resp, nil
}

// readHead reads the head of an answer on dc if parseHead takes it, and
// returns it with true, past it in dc.br (its values are slices of dc.br's
// buffer: valid until the next read); otherwise false, with nothing of the
// answer consumed. It waits for more bytes only while the head so far is
// complete lines parseHead takes, and only as long as dc.br can hold them.
func (dc *directConn) readHead() (answerHead, bool, error) {
	for {
		buf, _ := dc.br.Peek(dc.br.Buffered())
		h, n, st := parseHead(buf)
		switch {
		case st == headDone:
			_, _ = dc.br.Discard(n)
			return h, true, nil
		case st == headOther, len(buf) >= dc.br.Size():
			return h, false, nil
		}
		if _, err := dc.br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF // as ReadResponse says of a head cut short
			}
			return h, false, err
		}
	}
}

// readOther reads an answer on dc that the lean path does not, as roundTrip
// and do read it: net/http's ReadResponse, informational answers skipped, the
// body read to its end (at most maxResponseBytes) by a directBody, whose Close
// keeps or closes the connection.
func (t *directTransport) readOther(ctx context.Context, dc *directConn, addr string, stop func() bool) (*response, error) {
	resp, err := dc.readFinal(nil)
	if err != nil {
		return nil, dc.abort(ctx, stop, err)
	}
	b := &directBody{rc: resp.Body, t: t, dc: dc, addr: addr, stop: stop, keep: !resp.Close, ctx: ctx}
	defer b.Close()
	data, err := io.ReadAll(io.LimitReader(b, maxResponseBytes))
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}
