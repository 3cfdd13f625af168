package fencehttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/httpbuf"
)

// MaxBatchOps is the most operations one POST /v1/batch may carry; a batch with
// more is refused whole with 400 "invalid" (field "body").
const MaxBatchOps = 128

// The operations a batch may carry: the non-waiting lock routes.
const (
	batchAcquire = "acquire"
	batchRenew   = "renew"
	batchRelease = "release"
)

// batchOp is one operation of a batch as the server reads it: its op and lock
// name, and the rest of its members, the body of its single route.
type batchOp struct {
	op, name string
	body     []byte // {"ttl_ms":...}: the members other than op and name
	waiting  bool   // an acquire with a positive wait_ms: not batchable
	err      error  // the operation is malformed: answered with this error
}

// handleBatch serves POST /v1/batch: a JSON array of non-waiting lock operations,
// each {"op":"acquire"|"renew"|"release","name":NAME, ...the fields of its single
// route}, answered 200 with an array of their results in order, each
// {"status":S,"body":B}: the status and body its single route would have answered.
// Each operation runs as its own request would: the same validation, scope check
// (a scoped token may not reach another name through a batch), metrics and
// limits (the body limit applies to each operation's members). The operations of
// one batch run concurrently, as the concurrent requests they stand for would:
// their order is not an order of execution. A bad operation is answered in its
// slot and never fails the others; only a body that is not a JSON array of at
// most MaxBatchOps operations, or over the body limit, fails the whole batch.
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	const op = "batch"
	if r.ContentLength > s.cfg.MaxBodyBytes {
		s.fail(w, r, op, "", because(errTooLarge, "body of %d bytes is over the limit of %d", r.ContentLength, s.cfg.MaxBodyBytes))
		return
	}
	buf := getBuffer()
	defer putBuffer(buf)
	data, err := readAllInto((*buf)[:0], http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	*buf = data
	if err != nil {
		s.fail(w, r, op, "", bodyError(err, "body", s.cfg.MaxBodyBytes))
		return
	}
	ops, err := parseBatch(data)
	if err != nil {
		s.fail(w, r, op, "", err)
		return
	}
	var tok *AuthToken
	if len(s.tokens.toks) > 0 {
		// authenticate found it already; found again, it is checked against
		// each operation's route.
		tok = s.tokens.find(r.Header.Get("Authorization"))
	}
	recs := make([]*httpbuf.Response, len(ops))
	if len(ops) == 1 {
		recs[0] = s.runBatchOp(r, tok, &ops[0])
	} else {
		var wg sync.WaitGroup
		for i := range ops {
			wg.Go(func() { recs[i] = s.runBatchOp(r, tok, &ops[i]) })
		}
		wg.Wait()
	}
	out := getBuffer()
	defer putBuffer(out)
	b := append((*out)[:0], '[')
	for i := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(b, `{"status":`...), int64(recs[i].Status()), 10)
		b = append(append(b, `,"body":`...), bytes.TrimSpace(recs[i].Body())...)
		b = append(b, '}')
	}
	b = append(b, "]\n"...)
	*out = b
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	s.m.requests.WithLabelValues("batch", "200").Inc()
}

// runBatchOp runs o as the request of its single route would run, on behalf of
// the batch request parent, and returns the answer.
func (s *Server) runBatchOp(parent *http.Request, tok *AuthToken, o *batchOp) (rec *httpbuf.Response) {
	rec = httpbuf.New()
	// The request of the single route: the batch's context, headers and remote
	// address, with the operation's path and members as its body.
	sub := parent.WithContext(parent.Context())
	esc := "/v1/locks/" + EscapeName(o.name) + "/" + o.op
	sub.URL = &url.URL{Path: "/v1/locks/" + o.name + "/" + o.op, RawPath: esc}
	sub.RequestURI = esc
	sub.Method = http.MethodPost
	sub.Body = http.NoBody
	sub.ContentLength = int64(len(o.body))
	if len(o.body) > 0 {
		sub.Body = &bodyReader{Reader: bytes.NewReader(o.body)}
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving a batch operation", "op", o.op, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			rec = httpbuf.New()
			s.fail(rec, sub, "", "", errInternalError)
		}
	}()
	switch {
	case o.err != nil:
		s.fail(rec, sub, o.op, "", o.err)
		return
	case tok != nil:
		if err := permit(tok, sub); err != nil {
			s.log.Warn("forbidden request", "method", sub.Method, "route", routeOf(sub), "remote", sub.RemoteAddr, "rights", tok.Rights.String())
			s.fail(rec, sub, "", "", err)
			return
		}
	}
	switch {
	case o.waiting:
		s.fail(rec, sub, o.op, o.name, &fence.InvalidError{Field: "wait_ms", Reason: "must be 0 in a batch: a waiting acquire is not batchable (send it to /v1/locks/{name}/acquire)"})
	case o.op == batchAcquire:
		s.acquire(rec, sub, o.name)
	case o.op == batchRenew:
		s.renew(rec, sub, o.name)
	case o.op == batchRelease:
		s.release(rec, sub, o.name)
	}
	return rec
}

// bodyReader is an operation's body as a request body.
type bodyReader struct{ *bytes.Reader }

func (bodyReader) Close() error { return nil }

// parseBatch reads the body of POST /v1/batch: a JSON array of 1 to MaxBatchOps
// objects. An element that is no operation (not an object, no or an unknown op, a
// bad name) is returned with its error, answered in its slot; only a body that is
// not such an array is an error, a *fence.InvalidError of the field "body".
func parseBatch(data []byte) ([]batchOp, error) {
	if !json.Valid(data) {
		return nil, &fence.InvalidError{Field: "body", Reason: "is not valid JSON"}
	}
	i := skipSpace(data, 0)
	if data[i] != '[' {
		return nil, &fence.InvalidError{Field: "body", Reason: "must be a JSON array of operations"}
	}
	var ops []batchOp
	i = skipSpace(data, i+1)
	if data[i] == ']' {
		return nil, &fence.InvalidError{Field: "body", Reason: "must have at least one operation"}
	}
	// The members of every operation but op and name, one after the other.
	rest := make([]byte, 0, len(data))
	for {
		end := skipJSON(data, i)
		if len(ops) == MaxBatchOps {
			return nil, &fence.InvalidError{Field: "body", Reason: fmt.Sprintf("has more than %d operations, the most a batch may carry", MaxBatchOps)}
		}
		var o batchOp
		start := len(rest)
		rest = parseBatchOp(data[i:end], &o, rest)
		o.body = rest[start:len(rest):len(rest)]
		ops = append(ops, o)
		i = skipSpace(data, end)
		if data[i] == ']' {
			return ops, nil
		}
		i = skipSpace(data, i+1) // ','
	}
}

// parseBatchOp reads one element of a batch, valid JSON, into o, appending the
// members other than op and name to rest as a JSON object, which it returns.
func parseBatchOp(elem []byte, o *batchOp, rest []byte) []byte {
	if elem[0] != '{' {
		o.err = &fence.InvalidError{Field: "op", Reason: "each operation of a batch must be a JSON object"}
		return rest
	}
	rest = append(rest, '{')
	members := 0
	var hasOp, hasName bool
	for i := skipSpace(elem, 1); elem[i] != '}'; {
		kstart, kend := i, skipJSON(elem, i)
		key := jsonString(elem[kstart:kend])
		i = skipSpace(elem, skipSpace(elem, kend)+1) // ':'
		vend := skipJSON(elem, i)
		val := elem[i:vend]
		switch key {
		case "op", "name":
			field := &o.op
			seen := &hasOp
			if key == "name" {
				field, seen = &o.name, &hasName
			}
			switch {
			case *seen:
				o.err = &fence.InvalidError{Field: key, Reason: "must be given once"}
			case val[0] != '"':
				o.err = &fence.InvalidError{Field: key, Reason: "must be a string"}
			default:
				*field = jsonString(val)
			}
			*seen = true
		default:
			if members > 0 {
				rest = append(rest, ',')
			}
			members++
			rest = append(append(append(rest, elem[kstart:kend]...), ':'), val...)
			// wait_ms as encoding/json matches it (any case); a positive integer
			// asks for a wait. Any other value is the single route's to refuse.
			if bytes.EqualFold([]byte(key), []byte("wait_ms")) && positiveInteger(val) {
				o.waiting = true
			}
		}
		i = skipSpace(elem, vend)
		if elem[i] == ',' {
			i = skipSpace(elem, i+1)
		}
	}
	rest = append(rest, '}')
	if o.err != nil {
		return rest
	}
	switch {
	case !hasOp:
		o.err = &fence.InvalidError{Field: "op", Reason: "is required: acquire, renew or release"}
	case o.op != batchAcquire && o.op != batchRenew && o.op != batchRelease:
		o.err = &fence.InvalidError{Field: "op", Value: o.op, Reason: "must be acquire, renew or release (the operations that do not wait)"}
	case !hasName:
		o.err = &fence.InvalidError{Field: "name", Reason: "is required"}
	default:
		o.err = driver.ValidateName(o.name)
	}
	return rest
}

// positiveInteger reports whether the JSON value v is an integer above 0.
func positiveInteger(v []byte) bool {
	if len(v) == 0 || v[0] < '1' || v[0] > '9' {
		return false
	}
	for _, c := range v[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// jsonString returns the JSON string s (valid, quotes included) decoded.
func jsonString(s []byte) string {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s[1 : len(s)-1])
	}
	var v string
	_ = json.Unmarshal(s, &v)
	return v
}

// skipJSON returns the index just after the JSON value that starts at data[i],
// in data that json.Valid accepts.
func skipJSON(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipJSONString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = skipJSONString(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// skipJSONString returns the index just after the JSON string at data[i].
func skipJSONString(data []byte, i int) int {
	j := i + 1
	for j < len(data) && data[j] != '"' {
		if data[j] == '\\' {
			j++
		}
		j++
	}
	return j + 1
}
