package fencehttp

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"github.com/fencelock/fence"
)

// strictDecode decodes data into v as the server's decodeJSON does after its
// fast path: one object, no unknown fields, nothing after it.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// fastBodies returns fresh values of each body with a fast path, with the
// decoding the fast path stands in for.
func fastBodies() []struct {
	fast   fastDecoder
	slow   any
	decode func([]byte, any) error
} {
	lenient := func(data []byte, v any) error { return json.Unmarshal(data, v) }
	return []struct {
		fast   fastDecoder
		slow   any
		decode func([]byte, any) error
	}{
		{&acquireRequest{}, &acquireRequest{}, strictDecode},
		{&releaseRequest{}, &releaseRequest{}, strictDecode},
		{&renewRequest{}, &renewRequest{}, strictDecode},
		{&leaseResponse{}, &leaseResponse{}, lenient},
	}
}

// checkDecodeAgrees fails t if a fast path takes data and decodes it other than
// encoding/json does (or encoding/json refuses it), and returns how many took it.
func checkDecodeAgrees(t *testing.T, data []byte) int {
	t.Helper()
	taken := 0
	for _, b := range fastBodies() {
		if !b.fast.decodeFast(data) {
			if !reflect.ValueOf(b.fast).Elem().IsZero() {
				t.Fatalf("%T: refused %q but changed the value to %+v", b.fast, data, b.fast)
			}
			continue
		}
		taken++
		if err := b.decode(data, b.slow); err != nil {
			t.Fatalf("%T: fast path took %q, which encoding/json refuses: %v", b.fast, data, err)
		}
		if !reflect.DeepEqual(b.fast, b.slow) {
			t.Fatalf("%T: %q decodes to %+v by the fast path, %+v by encoding/json", b.fast, data, b.fast, b.slow)
		}
	}
	return taken
}

func TestFastJSON_DecodeAgreesWithEncodingJSON(t *testing.T) {
	// Each takes the fast path of the body named (and only bodies that agree).
	for _, data := range []string{
		`{"ttl_ms":30000}`, `{"ttl_ms":30000,"wait_ms":0}`, ` { "ttl_ms" : 5 , "wait_ms" : 100 , "owner" : "host-1 pid 7" } `,
		`{"ttl_ms":1,"limit":3}`, `{"ttl_ms":1,"shared":true}`, `{"shared":false}`, `{"wait_ms":-5}`, `{}`,
		`{"ttl_ms":1,"ttl_ms":2}`,
		`{"lease":"0123456789abcdef0123456789abcdef"}`, `{"lease":"x","ttl_ms":9}`,
		`{"name":"job1","token":7,"lease":"ab","ttl_ms":30000,"waited_ms":0}`, `{"name":"s","token":1,"lease":"ab","ttl_ms":1,"slot":2,"waited_ms":3}`,
	} {
		if checkDecodeAgrees(t, []byte(data)) == 0 {
			t.Errorf("%s: no fast path took it", data)
		}
	}
	// Each is left to encoding/json by every fast path, whatever it makes of it.
	for _, data := range []string{
		``, `null`, `[]`, `{`, `{"ttl_ms":1`, `{"ttl_ms":1}x`, `{"ttl_ms":1}{}`, `{"ttl_ms":1,}`, `{,}`,
		`{"TTL_MS":1}`, `{"ttl":1}`, `{"ttl_ms":null}`, `{"ttl_ms":"1"}`, `{"ttl_ms":1.5}`, `{"ttl_ms":1e3}`,
		`{"ttl_ms":01}`, `{"ttl_ms":-0}`, `{"ttl_ms":-}`, `{"ttl_ms":9223372036854775808}`, `{"ttl_ms":1234567890123456789}`,
		`{"owner":"a\"b"}`, `{"owner":"é"}`, `{"owner":"a\u0001"}`, "{\"owner\":\"a\x01\"}", `{"shared":tru}`, `{"shared":truex}`,
		`{"lease":5}`, `{"lease":"a\nb"}`, `{"name":"job1","token":-1}`, `{"name":"job1","extra":1}`,
		`{"name":"job1","token":18446744073709551615}`,
	} {
		if n := checkDecodeAgrees(t, []byte(data)); n != 0 {
			t.Errorf("%q: a fast path took it", data)
		}
	}
}

func FuzzFastJSON_Decode(f *testing.F) {
	for _, s := range []string{`{"ttl_ms":30000,"wait_ms":0,"owner":"a"}`, `{"lease":"ab"}`, `{"limit":2,"shared":true}`,
		`{"name":"n","token":1,"lease":"ab","ttl_ms":1,"slot":0,"waited_ms":0}`, ` {"ttl_ms" : -12 } `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeAgrees(t, data) })
}

func TestFastJSON_EncodeAgreesWithMarshal(t *testing.T) {
	ttl, limit, slot := int64(30000), 3, 0
	for _, tc := range []struct {
		v    any
		fast bool // the fast path must take it
	}{
		{acquireRequest{TTLms: &ttl}, true},
		{acquireRequest{TTLms: &ttl, WaitMs: 50, Owner: "host-1 pid 7", Limit: &limit, Shared: true}, true},
		{acquireRequest{}, true},
		{acquireRequest{TTLms: &ttl, Owner: "<b>&"}, false},
		{acquireRequest{TTLms: &ttl, Owner: "é"}, false},
		{releaseRequest{Lease: "0123456789abcdef"}, true},
		{releaseRequest{Lease: `a"b`}, false},
		{leaseResponse{Lease: Lease{Name: "jobs/nightly", Token: fence.Token(1 << 63), ID: "ab", TTLms: 1}, WaitedMs: 4}, true},
		{leaseResponse{Lease: Lease{Name: "s", Token: 2, ID: "ab", TTLms: 1, Slot: &slot}}, true},
		{leaseResponse{Lease: Lease{Name: "a\u2028", Token: 2, ID: "ab"}}, false},
		{Released{Name: "job1", Released: true}, true},
		{Released{Name: "a\\b"}, false},
		{Renewed{Name: "job1", TTLms: 30000}, true},
		{Renewed{Name: "job1"}, true},
		{Renewed{Name: "a<b"}, false},
	} {
		got, ok := appendJSON([]byte("prefix"), tc.v)
		if ok != tc.fast {
			t.Errorf("%#v: fast path taken %v, want %v", tc.v, ok, tc.fast)
		}
		want, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !ok && string(got) != "prefix":
			t.Errorf("%#v: refused but appended %q", tc.v, got)
		case ok && string(got) != "prefix"+string(want):
			t.Errorf("%#v: fast path wrote %s, json.Marshal %s", tc.v, got[len("prefix"):], want)
		}
	}
}
