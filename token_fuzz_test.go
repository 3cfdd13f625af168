package fence_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// Fuzz targets of the parsers and validators of the root package: tokens, fences
// (as JSON carries them), names, keys, owners, lease ids, limits and TTLs. Each
// checks the code against the contract as its doc states it, written out again
// here. A longer run of one:
//
//	go test . -run '^$' -fuzz '^FuzzParseToken$' -fuzztime 5m

// FuzzParseToken: ParseToken accepts exactly the decimal integers in [1, MaxToken]
// (digits only, as the Fence-Token header and the CLI carry them) of at most 20
// characters (it refuses longer input before parsing, leading zeros and all), and
// what it returns formats back to the same number.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"1", "42", fence.MaxToken.String(), (fence.MaxToken + 1).String(), "0", "007", "", "-1", "+1", " 1", "1e3", "0x10", "18446744073709551616", strings.Repeat("9", 21)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fence.ParseToken(s)
		digits := s != "" && strings.Trim(s, "0123456789") == ""
		n, perr := strconv.ParseUint(s, 10, 64)
		want := digits && len(s) <= 20 && perr == nil && n >= 1 && n <= uint64(fence.MaxToken)
		if err != nil {
			if want || !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("ParseToken(%q): %v (want %v)", s, err, want)
			}
			return
		}
		if !want || uint64(tok) != n {
			t.Fatalf("ParseToken(%q) = %d, want it refused", s, tok)
		}
		if again, err := fence.ParseToken(tok.String()); err != nil || again != tok {
			t.Fatalf("ParseToken(%q) = %d, but ParseToken(%q) = %d, %v", s, tok, tok.String(), again, err)
		}
	})
}

// The contracts, as the docs of validate.go state them.
func validName(s string) bool {
	if s == "" || len(s) > fence.MaxNameLen || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, unicode.IsControl)
}

func validOwner(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > fence.MaxOwnerLen || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

func validLeaseID(s string) bool {
	if s == "" || len(s) > fence.MaxLeaseIDLen {
		return false
	}
	return strings.Trim(s, "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~") == ""
}

// FuzzValidate: the validators of names, keys, owners and lease ids accept valid
// input and refuse invalid input (with ErrInvalid), and a lease id NewLeaseID makes
// is valid.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"a", "jobs/nightly", "ünï", "", "a\x00", "a\x7f", "\u0085", "\u200b", "\xff", " ", "a b", "~", strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat("é", 128), driver.NewLeaseID()} {
		f.Add(s)
	}
	check := func(t *testing.T, what, s string, err error, want bool) {
		if (err == nil) != want || err != nil && !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("validate %s %q: %v, want valid %v", what, s, err, want)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		check(t, "name", s, fence.ValidateName(s), validName(s))
		check(t, "key", s, fence.ValidateKey(s), validName(s))
		check(t, "owner", s, fence.ValidateOwner(s), validOwner(s))
		check(t, "lease id", s, fence.ValidateLeaseID(s), validLeaseID(s))
		if id := driver.NewLeaseID(); !validLeaseID(id) || driver.ValidateLease(s, id) != nil && validName(s) {
			t.Fatalf("NewLeaseID() = %q: refused with name %q", id, s)
		}
	})
}

// FuzzFenceJSON: a fence decoded from JSON (as the HTTP API and the ZooKeeper
// records carry it) is valid exactly when its name, token and lease id are, and a
// valid one encodes to JSON that decodes to the same fence.
func FuzzFenceJSON(f *testing.F) {
	for _, fc := range []fence.Fence{{Name: "a", Token: 1}, {Name: "ünï/x", Token: fence.MaxToken, LeaseID: driver.NewLeaseID()}} {
		b, _ := json.Marshal(fc)
		f.Add(b)
	}
	f.Add([]byte(`{"name":"a","token":9007199254740992}`))
	f.Add([]byte(`{"name":"a","token":1,"lease":"a b"}`))
	f.Add([]byte(`{"name":"a\u0000","token":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var fc fence.Fence
		if json.Unmarshal(data, &fc) != nil {
			return
		}
		err := fc.Validate()
		want := validName(fc.Name) && fc.Token >= 1 && fc.Token <= fence.MaxToken && (fc.LeaseID == "" || validLeaseID(fc.LeaseID))
		if (err == nil) != want || err != nil && !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("%+v.Validate() = %v, want valid %v", fc, err, want)
		}
		if err != nil {
			return
		}
		b, err := json.Marshal(fc)
		var again fence.Fence
		if err != nil || json.Unmarshal(b, &again) != nil || again != fc {
			t.Fatalf("fence %+v encodes as %s, which decodes as %+v (%v)", fc, b, again, err)
		}
	})
}

// FuzzValidateLimitTTL: limits are accepted in [1, MaxLimit], TTLs in [MinTTL,
// MaxTTL] and whole milliseconds, each refused otherwise with ErrInvalid.
func FuzzValidateLimitTTL(f *testing.F) {
	for _, v := range []int64{0, 1, 2, fence.MaxLimit, fence.MaxLimit + 1, -1, int64(time.Millisecond), int64(fence.MaxTTL), int64(fence.MaxTTL) + 1, int64(time.Millisecond) + 1, 1<<63 - 1, -1 << 63} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) {
		n := int(v)
		if err := fence.ValidateLimit(n); (err == nil) != (n >= 1 && n <= fence.MaxLimit) || err != nil && !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("ValidateLimit(%d): %v", n, err)
		}
		d := time.Duration(v)
		want := d >= fence.MinTTL && d <= fence.MaxTTL && d%time.Millisecond == 0
		if err := fence.ValidateTTL(d); (err == nil) != want || err != nil && !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("ValidateTTL(%v): %v, want valid %v", d, err, want)
		}
	})
}
