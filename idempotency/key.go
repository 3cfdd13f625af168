package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Key returns a stable idempotency key for the unit of work that parts name, such
// as a batch id and a line number: Key("batch-2024-06-01", "17"). Two holders of
// the same work item (say, a lock holder and the paused predecessor it fenced off)
// derive the same key, so the third-party API that cannot check fencing tokens
// still executes the item once.
//
// Never include the fencing token, lease id or attempt number: they differ between
// holders and retries, which is exactly what the key must not. The result is
// "ik_" and 32 hex digits (128 bits of SHA-256 over the length-prefixed parts, so
// ("ab","c") and ("a","bc") differ).
func Key(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return "ik_" + hex.EncodeToString(h.Sum(nil)[:16])
}
