// Package httpbuf keeps a handler's answer in memory until the caller decides what
// to do with it: fencehttp.FencedTx sends it only once the transaction has
// committed, and the idempotency middleware stores it before sending it.
package httpbuf

import (
	"bytes"
	"net/http"
)

// Response is an http.ResponseWriter that keeps the status, header and body a
// handler writes. Make one with New.
type Response struct {
	header http.Header
	status int // 0 until the handler writes a status or a body
	body   bytes.Buffer
}

// New returns an empty Response.
func New() *Response { return &Response{header: make(http.Header)} }

// Header returns the header the handler is writing.
func (b *Response) Header() http.Header { return b.header }

// WriteHeader keeps status, unless a status is kept already: the first one counts,
// as with a real connection.
func (b *Response) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

// Write appends p to the body (and keeps status 200 if none was written first). It
// returns len(p) and a nil error.
func (b *Response) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// Status returns the status the handler wrote, or 200 if it wrote none (what an
// http.Server would send).
func (b *Response) Status() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

// Body returns the body written so far; it aliases the buffer until the next Write.
func (b *Response) Body() []byte { return b.body.Bytes() }

// SendTo writes the kept answer to w: the header fields (replacing w's of the same
// name), then Status and the body.
func (b *Response) SendTo(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range b.header {
		h[k] = vs
	}
	w.WriteHeader(b.Status())
	_, _ = w.Write(b.body.Bytes())
}
