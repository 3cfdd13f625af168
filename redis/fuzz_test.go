package redis

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Fuzz targets of what the package reads back from Redis: the names in key tags
// and the replies of the KV get script. Each runs its seeds as a test; a longer
// run of one:
//
//	go test -short ./redis -run '^$' -fuzz '^FuzzKVGetReply$' -fuzztime 5m

// FuzzUnescapeName: unescapeName accepts exactly what escapeName makes, and gives
// back the name it was made from.
func FuzzUnescapeName(f *testing.F) {
	for _, s := range []string{"a", "{x}", "100%", "%7B", "a%2", "%7b", "%%", "ünï/{}"} {
		f.Add(s)
		f.Add(escapeName(s))
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, err := unescapeName(escapeName(s)); err != nil || got != s {
			t.Fatalf("unescapeName(escapeName(%q)) = %q, %v", s, got, err)
		}
		name, err := unescapeName(s)
		if err == nil && escapeName(name) != s {
			t.Fatalf("unescapeName(%q) = %q, which escapes as %q", s, name, escapeName(name))
		}
		if err != nil && escapeName(name) == s {
			t.Fatalf("unescapeName(%q) refused what escapeName makes: %v", s, err)
		}
	})
}

// reply builds a script reply from the fields of a kv_get reply and a shape that
// changes it: each byte of shape drops an element, swaps its type or appends one,
// so every shape of reply a broken or foreign script could return is reached.
func reply(name, tok, lease, value string, hasValue int64, shape []byte) []any {
	res := []any{int64(1), name, tok, lease, hasValue, value}
	for _, b := range shape {
		i := int(b>>3) % (len(res) + 1)
		switch b & 7 {
		case 0:
			if i < len(res) {
				res = append(res[:i], res[i+1:]...)
			}
		case 1:
			res = append(res, int64(b))
		case 2:
			res = append(res, string(rune(b)))
		case 3:
			if i < len(res) {
				res[i] = nil
			}
		case 4:
			if i < len(res) {
				res[i] = []any{res[i]}
			}
		case 5:
			if i < len(res) {
				res[i] = int64(i)
			}
		case 6:
			if i < len(res) {
				res[i] = strings.Repeat("1", i)
			}
		case 7:
			res = []any{int64(0)}
		}
	}
	return res
}

// FuzzKVGetReply: a reply decodes to a valid fence (with a value exactly when the
// reply says it has one) or is refused with ErrNotFound ({0}), ErrUnavailable (a
// reply of another shape) or ErrWrongType (a fence this package did not write);
// the reply of a valid fence always decodes to it.
func FuzzKVGetReply(f *testing.F) {
	id := driver.NewLeaseID()
	f.Add("jobs/a", "7", id, "v", int64(1), []byte{})
	f.Add("jobs/a", "7", "", "", int64(0), []byte{})
	f.Add("a", "0", "", "", int64(0), []byte{})
	f.Add("a", "1", "a b", "", int64(1), []byte{})
	f.Add("a", "1", "", "", int64(1), []byte{7})
	f.Add("a", "1", "", "", int64(1), []byte{0, 1, 2, 3, 4, 5, 6, 0x13, 0x2c})
	f.Fuzz(func(t *testing.T, name, tok, lease, value string, hasValue int64, shape []byte) {
		res := reply(name, tok, lease, value, hasValue, shape)
		it, err := kvGetReply(res, "fence:kv:{x}")
		if err != nil {
			if !errors.Is(err, fence.ErrNotFound) && !errors.Is(err, fence.ErrUnavailable) && !errors.Is(err, ErrWrongType) {
				t.Fatalf("kvGetReply(%#v): %v", res, err)
			}
		} else {
			if err := it.Fence.Validate(); err != nil {
				t.Fatalf("kvGetReply(%#v) = %+v, invalid: %v", res, it, err)
			}
			if h, _ := res[4].(int64); (it.Value != nil) != (h == 1) || h == 1 && string(it.Value) != res[5] {
				t.Fatalf("kvGetReply(%#v) = %+v: value and its flag disagree", res, it)
			}
		}
		// Valid input is never refused.
		tk, terr := fence.ParseToken(tok)
		want := fence.Fence{Name: name, Token: tk, LeaseID: lease}
		if terr != nil || want.Validate() != nil {
			return
		}
		got, err := kvGetReply([]any{int64(1), name, tok, lease, hasValue, value}, "fence:kv:{x}")
		if err != nil || got.Fence != want || (got.Value != nil) != (hasValue == 1) {
			t.Fatalf("kvGetReply of fence %+v: %+v, %v", want, got, err)
		}
	})
}
