package fencehttp_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/bolt"
	"github.com/fencelock/fence/fencehttp"
)

// acquireToken acquires name over HTTP with header and releases it, and returns
// the token granted.
func acquireToken(t *testing.T, base, name string, header map[string]string) fence.Token {
	t.Helper()
	a := call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/acquire", `{"ttl_ms":60000}`, header)
	if a.status != 200 {
		t.Fatalf("acquire %q: %d %s; want 200", name, a.status, a.raw)
	}
	tok, _ := a.json["token"].(float64)
	lease, _ := a.json["lease"].(string)
	if r := call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/release", `{"lease":"`+lease+`"}`, header); r.status != 200 {
		t.Fatalf("release %q: %d %s; want 200", name, r.status, r.raw)
	}
	return fence.Token(tok)
}

// wantHealBound checks a 400 answer to a heal of name beyond the bound: code
// invalid, field seen, the name's last token and the bound.
func wantHealBound(t *testing.T, a answer, name string, last fence.Token) {
	t.Helper()
	wantError(t, "heal of "+name+" beyond the bound", a, 400, "invalid")
	if a.json["field"] != "seen" || a.json["last"] != float64(last) || a.json["bound"] != float64(fence.MaxHealAhead) || a.json["name"] != name {
		t.Fatalf("heal of %s beyond the bound: %s; want field seen, name %q, last %d, bound %d", name, a.raw, name, last, uint64(fence.MaxHealAhead))
	}
}

// Issue 29's reproducer, on the embedded store `fence serve` runs by default:
// healing victim to 9007199254740991 answered 200 and from then on every
// acquire of every name, across restarts, was 409 token_exhausted. It is 400
// now, naming the bound and victim's last token; nothing changed, so every name
// (victim too) is granted as before, after a restart too. The Go client
// rebuilds the *fence.HealBoundError.
func TestServer_Heal_IssueReproducer_RefusedOtherNamesStillAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	start := func() (string, *bolt.Store) {
		store, err := bolt.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, hs := newServer(t, fencehttp.Config{Locker: store, KV: store})
		return hs.URL, store
	}
	base, store := start()
	last := acquireToken(t, base, "victim", nil)
	a := call(t, "POST", base+"/v1/locks/victim/heal", `{"seen":9007199254740991}`, nil)
	wantHealBound(t, a, "victim", last)
	msg, _ := a.json["error"].(string)
	if want := fmt.Sprintf(`heal "victim": invalid seen "9007199254740991": more than 4294967296 above the last token %d; heal in steps of at most that`, last); msg != want {
		t.Errorf("message:\n got %s\nwant %s", msg, want)
	}

	err := mustClient(t, base, nil).Heal(ctxFor(t), "victim", fence.MaxToken)
	var hb *fence.HealBoundError
	if !errors.As(err, &hb) || !errors.Is(err, fence.ErrInvalid) || *hb != (fence.HealBoundError{Name: "victim", Seen: fence.MaxToken, Last: last}) {
		t.Fatalf("Client.Heal(victim, MaxToken) = %v; want a *fence.HealBoundError{victim, %d, %d} matching ErrInvalid", err, uint64(fence.MaxToken), last)
	}
	if err.Error() != msg {
		t.Errorf("Client.Heal's message = %q; want the server's %q", err.Error(), msg)
	}

	other := acquireToken(t, base, "other", nil)
	if v := acquireToken(t, base, "victim", nil); v <= last || v >= fence.MaxHealAhead {
		t.Fatalf("victim after the refused heal: token %d; want above %d, not moved by the heal", v, last)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	base, store = start()
	defer store.Close()
	if o := acquireToken(t, base, "other", nil); o <= other || o >= fence.MaxHealAhead {
		t.Fatalf("other after a restart: token %d; want above %d, not moved by the refused heal", o, other)
	}
}

// Issue 29: a scoped token `admin,lock jobs/*` healed jobs/x and made other/b
// unusable. A heal now moves its own name alone: whatever a token scoped to
// jobs/* heals, other/b is granted what it would have been without the heal,
// and the scoped token can neither heal other/b nor go beyond the bound.
func TestServer_Heal_ScopedToken_NeverChangesWhatOtherNamesAreGranted(t *testing.T) {
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fence.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	toks, err := fencehttp.ParseAuthTokens(strings.NewReader("root admin\nops admin,lock jobs/*\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, hs := newServer(t, fencehttp.Config{Locker: store, KV: store, Tokens: toks})
	base, root, ops := hs.URL, bearer("root"), bearer("ops")

	b1 := acquireToken(t, base, "other/b", root)
	// jobs/x was never granted: its last token is the store's shared counter's.
	seen := b1 + fence.MaxHealAhead
	heal := func(name string, seen fence.Token) answer {
		return call(t, "POST", base+"/v1/locks/"+fencehttp.EscapeName(name)+"/heal", fmt.Sprintf(`{"seen":%d}`, seen), ops)
	}
	if a := heal("jobs/x", seen); a.status != 200 {
		t.Fatalf("scoped heal of jobs/x to its last token + the bound: %d %s; want 200", a.status, a.raw)
	}
	wantHealBound(t, heal("jobs/x", fence.MaxToken), "jobs/x", seen)
	if a := heal("other/b", 5); a.status != 403 {
		t.Fatalf("scoped heal of other/b: %d %s; want 403", a.status, a.raw)
	}
	if x := acquireToken(t, base, "jobs/x", ops); x <= seen {
		t.Fatalf("jobs/x after the heal to %d: token %d; want above it", seen, x)
	}
	if b2 := acquireToken(t, base, "other/b", root); b2 != b1+1 {
		t.Fatalf("other/b after jobs/x was healed to %d: token %d; want %d, as without the heal", seen, b2, b1+1)
	}
}
