package bolt

import (
	"encoding/binary"
	"fmt"

	"github.com/fencelock/fence"
)

// lockRec is a record of the locks bucket.
type lockRec struct {
	name string
	val  []byte
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// Lock record of a lock: flags(1) last(8) [token(8) wallExpiry(8) id(16)
// [ownerLen(2) owner]]. flagOwner is set only on a lease with an owner, so a
// record without one is byte for byte what earlier releases wrote and read.
//
// Lock record of a semaphore or a shared lock with live leases (flagMulti, and
// flagShared for shared ones): flags(1) last(8) limit(2) count(2), then count
// leases of token(8) wallExpiry(8) id(16) slot(2) ownerLen(2) owner. Earlier
// releases refuse it as malformed (ErrCorrupt) without writing anything. A
// name whose leases all ended is written as a lock record without lease.
const (
	flagLease  = 1
	flagOwner  = 2
	flagMulti  = 4
	flagShared = 8
)

// Lengths of the lock records: without a lease, with one, and the owner's
// length prefix after a lease; the head of a multi-lease record and each of
// its leases before the owner.
const (
	lockRecFree  = 9
	lockRecLease = 41
	lockRecOwner = 2
	lockRecMulti = 13
	lockRecHold  = 36
)

// holdFields is one lease of a lock record.
type holdFields struct {
	token   fence.Token
	wallExp int64
	id      [16]byte
	owner   string
	slot    int
}

// lockFields is a decoded lock record: the last token and the leases (none,
// one of a lock, or those of a semaphore of limit or of a shared lock).
type lockFields struct {
	last   fence.Token
	limit  int
	shared bool
	holds  []holdFields
}

func (s *Store) encodeLock(e *entry) []byte {
	if !e.held() {
		b := make([]byte, lockRecFree)
		binary.BigEndian.PutUint64(b[1:], uint64(e.last))
		return b
	}
	if e.limit == 0 && !e.shared {
		h := &e.h
		owner := h.ownerName()
		n := lockRecLease
		if owner != "" {
			n += lockRecOwner + len(owner)
		}
		b := make([]byte, lockRecLease, n)
		b[0] = flagLease
		binary.BigEndian.PutUint64(b[1:], uint64(e.last))
		binary.BigEndian.PutUint64(b[9:], uint64(h.token))
		binary.BigEndian.PutUint64(b[17:], uint64(s.wallAt(h.expires)))
		copy(b[25:], h.id[:])
		if owner != "" {
			b[0] |= flagOwner
			b = binary.BigEndian.AppendUint16(b, uint16(len(owner)))
			b = append(b, owner...)
		}
		return b
	}
	var buf [8]*hold
	hs := e.leases(buf[:0])
	n := lockRecMulti
	for _, h := range hs {
		n += lockRecHold + len(h.ownerName())
	}
	b := make([]byte, 1, n)
	b[0] = flagMulti
	if e.shared {
		b[0] |= flagShared
	}
	b = binary.BigEndian.AppendUint64(b, uint64(e.last))
	b = binary.BigEndian.AppendUint16(b, uint16(e.limit))
	b = binary.BigEndian.AppendUint16(b, uint16(len(hs)))
	for _, h := range hs {
		owner := h.ownerName()
		b = binary.BigEndian.AppendUint64(b, uint64(h.token))
		b = binary.BigEndian.AppendUint64(b, uint64(s.wallAt(h.expires)))
		b = append(b, h.id[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(h.slot))
		b = binary.BigEndian.AppendUint16(b, uint16(len(owner)))
		b = append(b, owner...)
	}
	return b
}

// decodeLock decodes a lock record (of the bucket or of the lease log); a lease
// record without flagOwner, as earlier releases wrote, has owner "". It returns
// an error matching ErrCorrupt, saying what is wrong, for a malformed record.
func decodeLock(v []byte) (lockFields, error) {
	var r lockFields
	bad := func(why string) (lockFields, error) {
		return lockFields{}, fmt.Errorf("lock record of %d bytes is malformed: %s: %w", len(v), why, ErrCorrupt)
	}
	if len(v) == 0 {
		return bad("empty")
	}
	if v[0]&flagMulti != 0 {
		return decodeMulti(v, bad)
	}
	var h holdFields
	switch {
	case len(v) == lockRecFree && v[0] == 0:
	case len(v) == lockRecLease && v[0] == flagLease:
	case len(v) >= lockRecLease+lockRecOwner && v[0] == flagLease|flagOwner:
		n := int(binary.BigEndian.Uint16(v[lockRecLease:]))
		h.owner = string(v[lockRecLease+lockRecOwner:])
		if n == 0 || len(h.owner) != n || fence.ValidateOwner(h.owner) != nil {
			return bad("bad owner")
		}
	default:
		return bad(fmt.Sprintf("flags %#x", v[0]))
	}
	r.last = fence.Token(binary.BigEndian.Uint64(v[1:]))
	if v[0]&flagLease != 0 {
		h.token = fence.Token(binary.BigEndian.Uint64(v[9:]))
		h.wallExp = int64(binary.BigEndian.Uint64(v[17:]))
		copy(h.id[:], v[25:])
		r.holds = []holdFields{h}
	}
	return r, nil
}

// decodeNamed decodes the lock record v of the locks bucket's key k: an error
// matching ErrCorrupt if v is malformed or k is not a lock name (a damaged key).
func decodeNamed(k, v []byte) (lockFields, error) {
	if err := fence.ValidateName(string(k)); err != nil {
		return lockFields{}, fmt.Errorf("the key is not a lock name: %v: %w", err, ErrCorrupt)
	}
	return decodeLock(v)
}

// decodeMulti decodes a lock record with flagMulti; bad makes its error.
func decodeMulti(v []byte, bad func(string) (lockFields, error)) (lockFields, error) {
	if len(v) < lockRecMulti || v[0]&^(flagMulti|flagShared) != 0 {
		return bad(fmt.Sprintf("flags %#x", v[0]))
	}
	r := lockFields{
		last:   fence.Token(binary.BigEndian.Uint64(v[1:])),
		limit:  int(binary.BigEndian.Uint16(v[9:])),
		shared: v[0]&flagShared != 0,
	}
	count := int(binary.BigEndian.Uint16(v[11:]))
	switch {
	case r.shared && r.limit != 0:
		return bad(fmt.Sprintf("shared with limit %d", r.limit))
	case !r.shared && (r.limit < 2 || r.limit > fence.MaxLimit):
		return bad(fmt.Sprintf("limit %d", r.limit))
	case count == 0 || count > fence.MaxLimit || !r.shared && count > r.limit:
		return bad(fmt.Sprintf("%d leases", count))
	}
	used := make(map[int]bool, count)
	p := v[lockRecMulti:]
	for i := range count {
		if len(p) < lockRecHold {
			return bad(fmt.Sprintf("lease %d cut short", i))
		}
		h := holdFields{
			token:   fence.Token(binary.BigEndian.Uint64(p)),
			wallExp: int64(binary.BigEndian.Uint64(p[8:])),
			slot:    int(binary.BigEndian.Uint16(p[32:])),
		}
		copy(h.id[:], p[16:32])
		n := int(binary.BigEndian.Uint16(p[34:]))
		if len(p) < lockRecHold+n {
			return bad(fmt.Sprintf("owner of lease %d cut short", i))
		}
		h.owner = string(p[lockRecHold : lockRecHold+n])
		p = p[lockRecHold+n:]
		switch {
		case h.token == 0 || h.token > r.last:
			return bad(fmt.Sprintf("lease %d has token %d, last token %d", i, h.token, r.last))
		case r.shared && h.slot != 0, !r.shared && (h.slot >= r.limit || used[h.slot]):
			return bad(fmt.Sprintf("lease %d has slot %d", i, h.slot))
		case n > 0 && fence.ValidateOwner(h.owner) != nil:
			return bad(fmt.Sprintf("lease %d has a bad owner", i))
		}
		used[h.slot] = true
		r.holds = append(r.holds, h)
	}
	if len(p) != 0 {
		return bad(fmt.Sprintf("%d bytes after the last lease", len(p)))
	}
	return r, nil
}
