package fencehttp

import (
	"strconv"
	"unicode/utf8"

	"github.com/fencelock/fence"
)

// The hot bodies of the API (acquire, renew, release and their answers) are a
// flat JSON object of a few integers, plain strings and booleans. encoding/json
// spends on each more than the rest of the request's handling; the functions here
// read and write the common form of those bodies directly and leave every other
// form to encoding/json, so the API's answers, errors included, are the same
// byte for byte (fastjson_test.go checks both ways agree).

// flatValue is one value of a flat object: an integer, a string without
// escapes, or a boolean.
type flatValue struct {
	kind byte // 'n' integer, 's' string, 'b' boolean
	n    int64
	s    []byte // a slice of the body; copy it to keep it
	b    bool
}

// scanFlat reads data, a JSON object whose values are integers (no fraction,
// exponent or leading zero, within int64), strings of printable ASCII without
// escapes, or true or false, with nothing after it but white space, and calls
// set with each member in order. It returns false, at once, for anything else
// (including any member set refuses), which the caller leaves to encoding/json.
func scanFlat(data []byte, set func(key []byte, v flatValue) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		key, j, ok := scanPlainString(data, i)
		if !ok {
			return false
		}
		i = skipSpace(data, j)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		var v flatValue
		if v, i, ok = scanFlatValue(data, i); !ok || !set(key, v) {
			return false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// scanPlainString reads a string of printable ASCII without escapes at data[i]
// and returns its contents and the index after its closing quote.
func scanPlainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scanFlatValue reads the value at data[i] and returns it and the index after it.
func scanFlatValue(data []byte, i int) (flatValue, int, bool) {
	if i >= len(data) {
		return flatValue{}, 0, false
	}
	switch c := data[i]; {
	case c == '"':
		s, j, ok := scanPlainString(data, i)
		return flatValue{kind: 's', s: s}, j, ok
	case c == 't' && len(data)-i >= 4 && string(data[i:i+4]) == "true":
		return flatValue{kind: 'b', b: true}, i + 4, endOfLiteral(data, i+4)
	case c == 'f' && len(data)-i >= 5 && string(data[i:i+5]) == "false":
		return flatValue{kind: 'b'}, i + 5, endOfLiteral(data, i+5)
	case c == '-' || (c >= '0' && c <= '9'):
		j := i
		if c == '-' {
			j++
		}
		start := j
		for j < len(data) && data[j] >= '0' && data[j] <= '9' {
			j++
		}
		// At least one digit, no leading zero (nor "-0"), at most 18 digits (no
		// overflow), and no fraction or exponent.
		if n := j - start; n == 0 || n > 18 || (data[start] == '0' && (n > 1 || c == '-')) || !endOfLiteral(data, j) {
			return flatValue{}, 0, false
		}
		n, err := strconv.ParseInt(string(data[i:j]), 10, 64)
		return flatValue{kind: 'n', n: n}, j, err == nil
	}
	return flatValue{}, 0, false
}

// endOfLiteral reports whether a number or literal ending at data[j) is followed
// by what may follow a value in a flat object.
func endOfLiteral(data []byte, j int) bool {
	if j >= len(data) {
		return false
	}
	switch data[j] {
	case ' ', '\t', '\n', '\r', ',', '}':
		return true
	}
	return false
}

// fastDecoder is a request body with a fast path: decodeFast sets the body
// from data and returns true, or leaves it as it was and returns false when data
// is not in the form scanFlat reads (decodeJSON then uses encoding/json). Fields
// are matched exactly (encoding/json also takes other cases of a key: those go to
// it), each later member overriding an earlier one, as encoding/json does.
type fastDecoder interface {
	decodeFast(data []byte) bool
}

// decode decodes data, a request body, with decodeFast or else decodeInto. The
// same for each request body below: a generic form would take the body to the
// heap (its method called through the instantiation's dictionary).
func (r *acquireRequest) decode(data []byte) error {
	if r.decodeFast(data) {
		return nil
	}
	return decodeInto(data, r)
}

func (r *releaseRequest) decode(data []byte) error {
	if r.decodeFast(data) {
		return nil
	}
	return decodeInto(data, r)
}

func (r *renewRequest) decode(data []byte) error {
	if r.decodeFast(data) {
		return nil
	}
	return decodeInto(data, r)
}

func (r *acquireRequest) decodeFast(data []byte) bool {
	var v acquireRequest
	ok := scanFlat(data, func(key []byte, x flatValue) bool {
		switch string(key) {
		case "ttl_ms":
			if x.kind != 'n' {
				return false
			}
			n := x.n
			v.TTLms = &n
		case "wait_ms":
			if x.kind != 'n' {
				return false
			}
			v.WaitMs = x.n
		case "owner":
			if x.kind != 's' {
				return false
			}
			v.Owner = string(x.s)
		case "limit":
			if x.kind != 'n' || x.n != int64(int(x.n)) {
				return false
			}
			n := int(x.n)
			v.Limit = &n
		case "shared":
			if x.kind != 'b' {
				return false
			}
			v.Shared = x.b
		default:
			return false
		}
		return true
	})
	if ok {
		*r = v
	}
	return ok
}

func (r *releaseRequest) decodeFast(data []byte) bool {
	var v releaseRequest
	ok := scanFlat(data, func(key []byte, x flatValue) bool {
		if string(key) != "lease" || x.kind != 's' {
			return false
		}
		v.Lease = string(x.s)
		return true
	})
	if ok {
		*r = v
	}
	return ok
}

func (r *renewRequest) decodeFast(data []byte) bool {
	var v renewRequest
	ok := scanFlat(data, func(key []byte, x flatValue) bool {
		switch {
		case string(key) == "lease" && x.kind == 's':
			v.Lease = string(x.s)
		case string(key) == "ttl_ms" && x.kind == 'n':
			n := x.n
			v.TTLms = &n
		default:
			return false
		}
		return true
	})
	if ok {
		*r = v
	}
	return ok
}

// decodeFast reads an acquire's 200 answer (see fastDecoder; unlike a request,
// unknown members go to encoding/json, which ignores them).
func (r *leaseResponse) decodeFast(data []byte) bool {
	var v leaseResponse
	ok := scanFlat(data, func(key []byte, x flatValue) bool {
		switch {
		case string(key) == "name" && x.kind == 's':
			v.Name = string(x.s)
		case string(key) == "token" && x.kind == 'n' && x.n >= 0:
			v.Token = fence.Token(x.n)
		case string(key) == "lease" && x.kind == 's':
			v.ID = string(x.s)
		case string(key) == "ttl_ms" && x.kind == 'n':
			v.TTLms = x.n
		case string(key) == "waited_ms" && x.kind == 'n':
			v.WaitedMs = x.n
		case string(key) == "slot" && x.kind == 'n' && x.n == int64(int(x.n)):
			n := int(x.n)
			v.Slot = &n
		default:
			return false
		}
		return true
	})
	if ok {
		*r = v
	}
	return ok
}

// plainJSONString reports whether encoding/json writes s as itself in quotes:
// printable ASCII without '"', '\\' and the characters it escapes for HTML
// ('<', '>', '&').
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendJSON appends v as encoding/json.Marshal writes it, for the hot bodies
// (acquireRequest, releaseRequest, leaseResponse, Released, Renewed) whose
// strings are plain (plainJSONString), and returns false (dst unchanged) for
// anything else. The server's handlers call the typed appenders below, which
// box nothing.
func appendJSON(dst []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case acquireRequest:
		return appendAcquireRequest(dst, v)
	case releaseRequest:
		if !plainJSONString(v.Lease) {
			return dst, false
		}
		return append(appendStr(dst, `{"lease":`, v.Lease), '}'), true
	case leaseResponse:
		return appendLeaseResponse(dst, v)
	case Released:
		return appendReleased(dst, v)
	case Renewed:
		return appendRenewed(dst, v)
	}
	return dst, false
}

// appendStr appends key (with what comes before it) and s, a plain string, quoted.
func appendStr(dst []byte, key, s string) []byte {
	dst = append(dst, key...)
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendNum appends key (with what comes before it) and n.
func appendNum(dst []byte, key string, n int64) []byte {
	return strconv.AppendInt(append(dst, key...), n, 10)
}

func appendAcquireRequest(dst []byte, v acquireRequest) ([]byte, bool) {
	if !plainJSONString(v.Owner) {
		return dst, false
	}
	if v.TTLms != nil {
		dst = appendNum(append(dst, '{'), `"ttl_ms":`, *v.TTLms)
	} else {
		dst = append(dst, `{"ttl_ms":null`...)
	}
	dst = appendNum(dst, `,"wait_ms":`, v.WaitMs)
	if v.Owner != "" {
		dst = appendStr(dst, `,"owner":`, v.Owner)
	}
	if v.Limit != nil {
		dst = appendNum(dst, `,"limit":`, int64(*v.Limit))
	}
	if v.Shared {
		dst = append(dst, `,"shared":true`...)
	}
	return append(dst, '}'), true
}

// appendLeaseResponse appends an acquire's 200 answer (see appendJSON).
func appendLeaseResponse(dst []byte, v leaseResponse) ([]byte, bool) {
	if !plainJSONString(v.Name) || !plainJSONString(v.ID) {
		return dst, false
	}
	dst = appendStr(dst, `{"name":`, v.Name)
	dst = strconv.AppendUint(append(dst, `,"token":`...), uint64(v.Token), 10)
	dst = appendStr(dst, `,"lease":`, v.ID)
	dst = appendNum(dst, `,"ttl_ms":`, v.TTLms)
	if v.Slot != nil {
		dst = appendNum(dst, `,"slot":`, int64(*v.Slot))
	}
	return append(appendNum(dst, `,"waited_ms":`, v.WaitedMs), '}'), true
}

// appendReleased appends a release's 200 answer (see appendJSON).
func appendReleased(dst []byte, v Released) ([]byte, bool) {
	if !plainJSONString(v.Name) {
		return dst, false
	}
	return append(strconv.AppendBool(append(appendStr(dst, `{"name":`, v.Name), `,"released":`...), v.Released), '}'), true
}

// appendRenewed appends a renew's 200 answer (see appendJSON).
func appendRenewed(dst []byte, v Renewed) ([]byte, bool) {
	if !plainJSONString(v.Name) {
		return dst, false
	}
	return append(appendNum(appendStr(dst, `{"name":`, v.Name), `,"ttl_ms":`, v.TTLms), '}'), true
}
