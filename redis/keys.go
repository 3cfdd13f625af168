package redis

import (
	"fmt"
	"strings"
)

// Key layout. For a lock name N (escaped as E, see escapeName) and the default
// prefix "fence:":
//
//	fence:{E}:lock    the current lease: "<lease id> <token>", or "<lease id> <owner>
//	                  <token>" with an owner, with the lease's TTL (PX)
//	fence:{E}:token   the fencing counter; never expires, never deleted by fence
//	fence:{E}:holders the semaphore or shared leases (a hash), while the lock key
//	                  holds " <token>" (see scripts/holders.lua), expiring with it
//	fence:{E}:expiry  their expiries (a sorted set), likewise
//	fence:{E}:slots   the semaphore slots they take (a bitmap), likewise
//	fence:{E}:wake    the (sharded) pub/sub channel a grant, release, revoke or heal
//	                  publishes on ("granted", "released", "revoked", "healed")
//
// The braces make E the Cluster hash tag, so they all live in one slot and one
// script can touch every key.
const (
	lockSuffix    = ":lock"
	tokenSuffix   = ":token"
	holdersSuffix = ":holders"
	expirySuffix  = ":expiry"
	slotsSuffix   = ":slots"
	wakeSuffix    = ":wake"
)

// escapeName makes a lock name usable inside a hash tag: a tag ends at the first '}'
// and an empty tag ("{}") hashes the whole key, so '{', '}' and the escape character
// '%' are percent-encoded (%7B, %7D, %25). Every other byte is kept, so keys stay
// readable in redis-cli. The mapping is one to one (see unescapeName).
func escapeName(name string) string {
	if !strings.ContainsAny(name, "{}%") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescapeName reverses escapeName. It returns an error for a string escapeName
// cannot have produced.
func unescapeName(s string) (string, error) {
	if strings.ContainsAny(s, "{}") {
		return "", fmt.Errorf("redis: unescaped brace in key tag %q", s)
	}
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+3 > len(s) {
			return "", fmt.Errorf("redis: bad escape in key tag %q", s)
		}
		switch s[i+1 : i+3] {
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		case "25":
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("redis: bad escape in key tag %q", s)
		}
		i += 2
	}
	return b.String(), nil
}

// keys are the Redis keys and channel of one lock name.
type keys struct {
	lock, token, wake      string
	holders, expiry, slots string // of semaphore and shared leases
}

func (l *Locker) keysFor(name string) keys { return nameKeys(l.prefix, name) }

// nameKeys returns the keys of the lock name under prefix.
func nameKeys(prefix, name string) keys {
	// One allocation for all six (an acquire and a release each make them): every
	// key is a slice of one string.
	e := escapeName(name)
	suffixes := [...]string{lockSuffix, tokenSuffix, wakeSuffix, holdersSuffix, expirySuffix, slotsSuffix}
	base := len(prefix) + 1 + len(e) + 1
	var b strings.Builder
	b.Grow(len(suffixes)*base + len(lockSuffix+tokenSuffix+wakeSuffix+holdersSuffix+expirySuffix+slotsSuffix))
	var ks [len(suffixes)]string
	for i, suffix := range suffixes {
		start := b.Len()
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(e)
		b.WriteByte('}')
		b.WriteString(suffix)
		ks[i] = b.String()[start:]
	}
	return keys{lock: ks[0], token: ks[1], wake: ks[2], holders: ks[3], expiry: ks[4], slots: ks[5]}
}

// leaseKeys are the keys of the lease, revoke and inspect scripts' KEYS: the lock
// key and the keys of semaphore and shared leases.
func (k keys) leaseKeys() []string { return []string{k.lock, k.holders, k.expiry, k.slots} }

// globEscape escapes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\^`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
