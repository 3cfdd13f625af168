package service

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"strings"

	"github.com/fencelock/fence"
)

// Rights are what a scoped bearer token may do, as a set of bits.
type Rights uint8

// The rights of a scoped token. Each operation needs one of them on the lock name
// or key it names (see AuthToken.Permit); RightAdmin includes the others.
const (
	// RightRead: GET of a lock's state (and its blocking queries), of the list of
	// locks, and of a key's value.
	RightRead Rights = 1 << iota
	// RightLock: acquire, renew and release.
	RightLock
	// RightWrite: PUT and DELETE /v1/kv/{key} and POST /v1/fences/{key}.
	RightWrite
	// RightAdmin: revoke and heal, purge (DELETE /v1/kv/{key}?purge=true),
	// /metrics, and all of the above.
	RightAdmin

	// RightsAll is every right: what an unscoped token has.
	RightsAll = RightRead | RightLock | RightWrite | RightAdmin
)

var rightNames = []struct {
	r    Rights
	name string
}{{RightRead, "read"}, {RightLock, "lock"}, {RightWrite, "write"}, {RightAdmin, "admin"}}

// String returns the rights as a token file writes them: "read,lock", "all".
func (r Rights) String() string {
	if r&RightAdmin != 0 {
		return "all"
	}
	var names []string
	for _, n := range rightNames {
		if r&n.r != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// AuthToken is a bearer token with what it may do: Rights on the lock names and
// keys that match one of Names. A name pattern ending in '*' matches every name
// that starts with what comes before it ("jobs/*" matches "jobs/a", not "jobsx";
// "a*" matches "a" and "ab"); any other pattern matches that one name exactly
// ("a" matches "a", not "ab"); "*" matches all. Nil Names match all.
type AuthToken struct {
	Secret []byte
	Rights Rights
	Names  []string
}

// allows reports whether t may use right on name.
func (t *AuthToken) allows(right Rights, name string) bool {
	if t.Rights&(right|RightAdmin) == 0 {
		return false
	}
	return t.Names == nil || matchAny(t.Names, name)
}

// allowsPrefix reports whether t may use right on every name that starts with
// prefix: a listing's prefix must lie within one of its prefix patterns.
func (t *AuthToken) allowsPrefix(right Rights, prefix string) bool {
	if t.Rights&(right|RightAdmin) == 0 {
		return false
	}
	if t.Names == nil {
		return true
	}
	for _, p := range t.Names {
		if base, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(prefix, base) {
			return true
		}
	}
	return false
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if base, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, base) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// ParseAuthTokens reads a token file, as `fence serve --auth-token-file` does: one
// token a line, blank lines and lines starting with # skipped. A line is
//
//	SECRET [RIGHTS [PATTERN ...]]
//
// with RIGHTS a comma-separated list of read, lock, write and admin (or all), and
// each PATTERN a lock name or key, or a prefix ending in '*' (see AuthToken). A
// line with the secret alone has every right on every name, as tokens had before
// scopes; one with rights and no pattern has them on every name. The secret may
// not contain white space. It returns an error matching fence.ErrInvalid that
// names the line for a malformed line, a bad pattern or a secret given twice, or
// the reader's error.
func ParseAuthTokens(r io.Reader) ([]AuthToken, error) {
	var toks []AuthToken
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		t := AuthToken{Secret: []byte(fields[0]), Rights: RightsAll}
		if prev, ok := seen[fields[0]]; ok {
			return nil, tokenLineErr(n, "the secret of line %d again", prev)
		}
		seen[fields[0]] = n
		if len(fields) > 1 {
			rights, err := parseRights(fields[1])
			if err != nil {
				return nil, tokenLineErr(n, "%v", err)
			}
			t.Rights = rights
		}
		for _, p := range fields[min(len(fields), 2):] {
			if err := validPattern(p); err != nil {
				return nil, tokenLineErr(n, "%v", err)
			}
			t.Names = append(t.Names, p)
		}
		toks = append(toks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	return toks, nil
}

func tokenLineErr(n int, format string, args ...any) error {
	return fmt.Errorf("token file line %d: %w", n, &fence.InvalidError{Field: "token line", Value: fmt.Sprint(n), Reason: fmt.Sprintf(format, args...)})
}

func parseRights(s string) (Rights, error) {
	var r Rights
	for _, name := range strings.Split(s, ",") {
		if name == "all" {
			r |= RightsAll
			continue
		}
		found := false
		for _, n := range rightNames {
			if n.name == name {
				r |= n.r
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown right %q (want read, lock, write, admin or all, separated by commas)", name)
		}
	}
	return r, nil
}

// validPattern checks a name pattern: a name or key as fence accepts it, or one
// followed by '*', or "*" alone.
func validPattern(p string) error {
	base, prefix := strings.CutSuffix(p, "*")
	if prefix && base == "" {
		return nil
	}
	if strings.Contains(base, "*") {
		return fmt.Errorf("pattern %q: '*' may only end a pattern", p)
	}
	if err := fence.ValidateName(base); err != nil {
		return fmt.Errorf("pattern %q: %v", p, err)
	}
	return nil
}

// scopes holds the service's tokens by the SHA-256 of their secret.
type scopes struct {
	sums [][sha256.Size]byte
	toks []AuthToken
}

// add registers t; an empty secret is an error.
func (s *scopes) add(t AuthToken) error {
	if len(t.Secret) == 0 {
		return fmt.Errorf("%w: auth token %d is empty", fence.ErrInvalid, len(s.toks)+1)
	}
	if t.Rights == 0 {
		return fmt.Errorf("%w: auth token %d has no rights", fence.ErrInvalid, len(s.toks)+1)
	}
	s.sums = append(s.sums, sha256.Sum256(t.Secret))
	s.toks = append(s.toks, t)
	return nil
}

// find returns the token whose secret is secret, or nil. It compares SHA-256
// sums in constant time against every token, so neither the length nor the
// position of a match leaks through timing.
func (s *scopes) find(secret string) *AuthToken {
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range s.sums {
		if subtle.ConstantTimeCompare(sum[:], s.sums[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &s.toks[found]
}

// Permit returns nil if t may do op on name, or an error of ErrForbidden
// ("forbidden") that says what was refused. op is the operation's word: inspect
// and watch (of the lock name), list (name is the listing's prefix), acquire,
// renew and release (of the lock name), revoke and heal (admin, of the lock
// name), get (of the key), put, delete and fence (of the key), purge (admin, of
// the key), metrics (admin), "cluster status" (any token) and "cluster admin"
// (admin on every name). An unknown op is refused.
func (t *AuthToken) Permit(op, name string) error {
	if t.Rights&RightAdmin != 0 && t.Names == nil {
		return nil
	}
	var (
		right Rights
		what  = "lock"
	)
	switch op {
	case "metrics":
		if t.Rights&RightAdmin != 0 {
			return nil
		}
		return Because(ErrForbidden, "this token may not read /metrics: that needs admin")
	case "list":
		if t.allowsPrefix(RightRead, name) {
			return nil
		}
		return Because(ErrForbidden, "this token may not list locks with prefix %q (it has %s %s)", name, t.Rights, scopeOf(t))
	case "inspect", "watch":
		right = RightRead
	case "acquire", "renew", "release":
		right = RightLock
	case "revoke", "heal":
		right = RightAdmin
	case "get":
		what, right = "key", RightRead
	case "put", "delete", "fence":
		what, right = "key", RightWrite
	case "purge":
		what, right = "key", RightAdmin // a purge sets a key's fence back
	case "cluster status":
		return nil // any token may read the members
	case "cluster admin":
		// Unscoped admins passed above: a member change or a backup concerns
		// every name.
		return Because(ErrForbidden, "this token may not change or back up the cluster: that needs admin on every name (it has %s %s)", t.Rights, scopeOf(t))
	default:
		return Because(ErrForbidden, "this token may not %s", op)
	}
	if t.allows(right, name) {
		return nil
	}
	return Because(ErrForbidden, "this token may not %s %s %q (it has %s %s)", verbOf(right, what), what, name, t.Rights, scopeOf(t))
}

// verbOf words what a right lets a token do, for a 403's message.
func verbOf(r Rights, what string) string {
	switch r {
	case RightRead:
		return "read"
	case RightLock:
		return "hold"
	case RightWrite:
		return "write"
	}
	if what == "key" {
		return "purge"
	}
	return "revoke or heal"
}

// scopeOf words the names a token covers, for a 403's message.
func scopeOf(t *AuthToken) string {
	if t.Names == nil {
		return "on every name"
	}
	return "on " + strings.Join(t.Names, " ")
}
