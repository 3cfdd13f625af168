package fence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Write attempts (P3 through retries). A fenced write whose first attempt is slow
// (its server paused, a packet retransmitted after a partition) may be retried
// by its client and succeed; if the holder then writes again, the first attempt
// can still land last, and its fence (same token, same lease) is admitted. The
// store cannot tell it from a new write unless the write is named: an attempt id,
// the same on every attempt of one logical write, which the store claims for the
// key in the same step as the write. An attempt that finds its id claimed under
// the key's current fence is the write already applied, answered as its success
// with nothing written.
const (
	// MaxAttemptIDLen is the longest attempt id (WithWriteAttempt) accepted, in
	// bytes.
	MaxAttemptIDLen = 64
	// MaxWriteAttempts is how many attempt ids a KV remembers per key, under the
	// key's current fence. Past it the oldest is forgotten: an attempt arriving
	// after MaxWriteAttempts or more later writes of the same holder to the same
	// key is applied as a new write would be (as a write without an attempt id
	// always is).
	MaxWriteAttempts = 32
)

type attemptKey struct{}

// WithWriteAttempt returns a copy of ctx that names the fenced write made with it
// (KV.Put, KV.Delete) by the attempt id id. Every attempt of one logical write
// carries the same id, whichever process or server sends it; a KV that keeps
// attempt ids applies the first attempt that reaches it and answers every later
// one, as long as the key's fence is unchanged, as that write's success without
// writing, so a late attempt never replaces a later write of the same holder.
// The remembered ids are cleared when the key's fence moves to another token or
// lease, and at most MaxWriteAttempts are kept per key.
//
// id is 1 to MaxAttemptIDLen bytes of printable ASCII without spaces; a KV
// returns ErrInvalid for any other. Use a new random id (128 bits) per logical
// write; the HTTP client makes one for each Put and Delete without it. A KV
// claims the id with the write's content (AttemptKey): an id reused for a write
// of other content is another write and is applied, but one reused for the same
// content under the same fence is taken for a retry, a no-op answered as
// success, even after other writes changed the key. A write whose context
// carries no id gets no protection against its own late attempt. A KV that does
// not keep attempt ids ignores it.
func WithWriteAttempt(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, attemptKey{}, id)
}

// WriteAttempt returns the attempt id that ctx names its write with
// (WithWriteAttempt), or "" if none.
func WriteAttempt(ctx context.Context) string {
	id, _ := ctx.Value(attemptKey{}).(string)
	return id
}

// ValidateAttemptID returns nil if id is 1 to MaxAttemptIDLen bytes of printable
// ASCII without spaces (WithWriteAttempt), and an *InvalidError (matching
// ErrInvalid) naming "attempt" otherwise.
func ValidateAttemptID(id string) error { return validateID("attempt", id, MaxAttemptIDLen) }

// AttemptKey returns what a KV claims for a write of op ("put" or "delete") of
// value whose context names it by an attempt id (WithWriteAttempt): the id, '#',
// and 16 hex digits of a SHA-256 of op and value; "" if ctx names none. A write
// is its id and its content: an id reused for a write of other content names
// another write, which is applied as such, never taken for a retry and dropped.
// It returns an *InvalidError (ErrInvalid) naming "attempt" for a malformed id.
// The key is at most MaxAttemptIDLen+17 bytes of printable ASCII without spaces.
func AttemptKey(ctx context.Context, op string, value []byte) (string, error) {
	id := WriteAttempt(ctx)
	if id == "" {
		return "", nil
	}
	if err := ValidateAttemptID(id); err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write(value)
	return id + "#" + hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// Replayed reports whether a fenced write of f carrying attempt id (its
// AttemptKey) is one a key has already applied: id is not empty, the key's fence
// cur is f itself (name, token and lease), and id is among the attempts the key
// remembers. A KV answers
// such a write as its success, with nothing written; it checks this after it has
// checked that f was issued (P9), before Admit.
func Replayed(cur Fence, attempts []string, f Fence, id string) bool {
	if id == "" || cur != f {
		return false
	}
	for _, a := range attempts {
		if a == id {
			return true
		}
	}
	return false
}

// RememberAttempt returns the attempt ids a key remembers after a write of next
// carrying attempt id is applied over the key's fence cur, which remembered
// attempts: none of them if the fence moved (another name, token or lease), then
// id if it is not empty, keeping the newest MaxWriteAttempts. attempts is not
// modified.
func RememberAttempt(cur Fence, attempts []string, next Fence, id string) []string {
	if cur != next {
		attempts = nil
	}
	if id == "" {
		return attempts
	}
	if len(attempts) >= MaxWriteAttempts {
		attempts = attempts[len(attempts)-MaxWriteAttempts+1:]
	}
	out := make([]string, 0, len(attempts)+1)
	return append(append(out, attempts...), id)
}
