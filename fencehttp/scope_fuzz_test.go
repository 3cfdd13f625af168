package fencehttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
)

// Fuzz targets of the auth token file and of the fence headers, decoded without a
// server. A longer run of one (see also fuzz_test.go):
//
//	go test ./fencehttp -run '^$' -fuzz '^FuzzParseAuthTokens$' -fuzztime 5m

// effective is what rights grant: admin includes every other right.
func effective(r fencehttp.Rights) fencehttp.Rights {
	if r&fencehttp.RightAdmin != 0 {
		return fencehttp.RightsAll
	}
	return r
}

// validPattern is the pattern rule of ParseAuthTokens' doc: "*", a name, or a name
// followed by '*'.
func validPattern(p string) bool {
	base, _ := strings.CutSuffix(p, "*")
	return p == "*" || !strings.Contains(base, "*") && fence.ValidateName(base) == nil
}

// FuzzParseAuthTokens: a token file parses to one token per line that is neither
// blank nor a comment, each with a secret without white space given once, some
// rights and valid patterns; written back as a token file (Rights.String and the
// patterns) it parses to the same tokens. A file it refuses is refused with
// ErrInvalid.
func FuzzParseAuthTokens(f *testing.F) {
	for _, s := range []string{
		"s3cret\n", "a read a\nb lock,write jobs/* x\n# comment\n\n  c all *\n", "a admin\n", "a\r\nb read\r\n",
		"a read\na lock\n", "a bogus\n", "a read a*b\n", "a read ,\n", "a read a**\n", "\ta\u00a0read x\n", "#a\n a\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		toks, err := fencehttp.ParseAuthTokens(strings.NewReader(file))
		if err != nil {
			if !errors.Is(err, fence.ErrInvalid) {
				t.Fatalf("ParseAuthTokens(%q): %v, want ErrInvalid", file, err)
			}
			return
		}
		lines := 0
		for _, l := range strings.Split(file, "\n") {
			if l = strings.TrimSpace(strings.TrimSuffix(l, "\r")); l != "" && !strings.HasPrefix(l, "#") {
				lines++
			}
		}
		if len(toks) != lines {
			t.Fatalf("ParseAuthTokens(%q): %d tokens from %d lines", file, len(toks), lines)
		}
		seen := map[string]bool{}
		var b strings.Builder
		for _, tok := range toks {
			s := string(tok.Secret)
			if s == "" || strings.ContainsFunc(s, unicode.IsSpace) || strings.HasPrefix(s, "#") || seen[s] || tok.Rights == 0 || tok.Rights&^fencehttp.RightsAll != 0 {
				t.Fatalf("ParseAuthTokens(%q): bad token %+v", file, tok)
			}
			seen[s] = true
			b.WriteString(s + " " + tok.Rights.String())
			for _, p := range tok.Names {
				if !validPattern(p) {
					t.Fatalf("ParseAuthTokens(%q): bad pattern %q", file, p)
				}
				b.WriteString(" " + p)
			}
			b.WriteString("\n")
		}
		again, err := fencehttp.ParseAuthTokens(strings.NewReader(b.String()))
		if err != nil || len(again) != len(toks) {
			t.Fatalf("ParseAuthTokens(%q) written back as %q: %d tokens, %v", file, b.String(), len(again), err)
		}
		for i, tok := range toks {
			a := again[i]
			if string(a.Secret) != string(tok.Secret) || effective(a.Rights) != effective(tok.Rights) || strings.Join(a.Names, " ") != strings.Join(tok.Names, " ") {
				t.Fatalf("token %+v written back as %q parses as %+v", tok, b.String(), a)
			}
		}
	})
}

// FuzzFenceFromRequest: FenceFromRequest accepts the headers of every valid fence
// (as SetHeaders writes them) and gives it back; what it accepts from any headers
// is a valid fence that SetHeaders writes and FenceFromRequest reads back the
// same; what it refuses is an *fence.InvalidError naming one of the headers.
func FuzzFenceFromRequest(f *testing.F) {
	id := driver.NewLeaseID()
	f.Add("1", "a", "", uint8(0))
	f.Add("42", "jobs%2Fnightly", id, uint8(0))
	f.Add(" 7 ", "%C3%BC", " "+id+" ", uint8(0))
	f.Add("9007199254740992", "a", "", uint8(0))
	f.Add("3", "a%ZZ", "x y", uint8(0))
	f.Add("3", "a", id, uint8(7))
	f.Fuzz(func(t *testing.T, token, lock, lease string, repeat uint8) {
		for _, v := range []string{token, lock, lease} {
			if strings.ContainsAny(v, "\r\n\x00") { // net/http never delivers these
				return
			}
		}
		req := httptest.NewRequest(http.MethodPut, "/", nil)
		for i, kv := range [][2]string{{fencehttp.HeaderToken, token}, {fencehttp.HeaderLock, lock}, {fencehttp.HeaderLease, lease}} {
			if kv[1] == "" && i > 0 {
				continue
			}
			req.Header.Add(kv[0], kv[1])
			if repeat&(1<<i) != 0 {
				req.Header.Add(kv[0], kv[1])
			}
		}
		fc, err := fencehttp.FenceFromRequest(req)
		if err != nil {
			var ie *fence.InvalidError
			if !errors.As(err, &ie) || ie.Field != fencehttp.HeaderToken && ie.Field != fencehttp.HeaderLock && ie.Field != fencehttp.HeaderLease {
				t.Fatalf("FenceFromRequest(%q, %q, %q, %d): %v, want an InvalidError naming a header", token, lock, lease, repeat, err)
			}
		} else {
			if err := fc.Validate(); err != nil {
				t.Fatalf("FenceFromRequest(%q, %q, %q, %d) = %+v, invalid: %v", token, lock, lease, repeat, fc, err)
			}
			roundTrip(t, fc)
		}
		// Valid input is never refused.
		tok, terr := fence.ParseToken(token)
		name, nerr := url.PathUnescape(lock)
		if valid := (fence.Fence{Name: name, Token: tok, LeaseID: lease}); terr == nil && nerr == nil && valid.Validate() == nil {
			roundTrip(t, valid)
		}
		if valid := (fence.Fence{Name: lock, Token: tok, LeaseID: lease}); terr == nil && valid.Validate() == nil {
			roundTrip(t, valid)
		}
	})
}

// roundTrip checks that FenceFromRequest reads back the headers SetHeaders writes
// for fc.
func roundTrip(t *testing.T, fc fence.Fence) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPut, "/", nil)
	fencehttp.SetHeaders(req, fc)
	if got, err := fencehttp.FenceFromRequest(req); err != nil || got != fc {
		t.Fatalf("SetHeaders(%+v) read back as %+v, %v", fc, got, err)
	}
}
