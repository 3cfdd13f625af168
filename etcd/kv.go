package etcd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
)

// MaxValueSize is the largest value KV.Put accepts, in bytes. etcd refuses requests
// above 1.5 MiB by default (--max-request-bytes); this leaves room for the fence.
const MaxValueSize = 1 << 20

// KV is a fenced key-value store in etcd (fence.KV, fence.Guard and fence.Purger).
// Each key is one etcd key under Options.Prefix+"kv/" whose value holds the key's
// highest fence and its data, so the fence and the data change in one etcd write. A
// Put reads the record, applies fence.Admit, and writes with a transaction that
// compares the record's mod revision: a concurrent change makes it re-check against
// the new record, so no write is ever admitted against a fence that is no longer the
// highest. It is safe for concurrent use, also across processes.
//
// The KV of a Store also refuses fences its prefix's Locker never issued (P9, see
// the package documentation); a KV made by NewKV guards with any lock's tokens and
// does not check that they were issued.
type KV struct {
	cli    *clientv3.Client
	keys   keys
	issued bool // check P9 against the token records of keys.prefix
	closed atomic.Bool
}

var (
	_ fence.KV     = (*KV)(nil)
	_ fence.Guard  = (*KV)(nil)
	_ fence.Purger = (*KV)(nil)
)

// NewKV returns a KV that keeps its data in etcd through cli, under opts.Prefix. It
// admits fences by fence.Admit alone: it does not check that a Locker issued them
// (a Store's KV does). The caller keeps ownership of cli.
func NewKV(cli *clientv3.Client, opts *Options) *KV {
	return &KV{cli: cli, keys: keys{opts.prefix()}}
}

// record is what a KV key holds.
type record struct {
	fence    fence.Fence
	hasValue bool
	value    []byte
	// attempts are the attempt ids of the puts and deletes applied under fence
	// (see fence.RememberAttempt).
	attempts []string
}

// Record encoding: magic 'F', version 1, token (8 bytes big-endian), flags (1: has a
// value), uvarint length + lock name, uvarint length + lease id, then the value.
// Version 2, written only for a record that remembers attempt ids, has after the
// lease id a uvarint count (at least 1) of uvarint length + attempt id: a reader
// of version 1 alone refuses it rather than read the ids as value bytes.
const (
	recMagic          = 'F'
	recVersion        = 1
	recVersionAttempt = 2
	flagValue         = 1
)

func (r record) encode() []byte {
	n := 2 + 8 + 1 + 3*binary.MaxVarintLen64 + len(r.fence.Name) + len(r.fence.LeaseID) + len(r.value)
	for _, a := range r.attempts {
		n += binary.MaxVarintLen64 + len(a)
	}
	b := make([]byte, 0, n)
	version := byte(recVersion)
	if len(r.attempts) > 0 {
		version = recVersionAttempt
	}
	b = append(b, recMagic, version)
	b = binary.BigEndian.AppendUint64(b, uint64(r.fence.Token))
	var flags byte
	if r.hasValue {
		flags |= flagValue
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(r.fence.Name)))
	b = append(b, r.fence.Name...)
	b = binary.AppendUvarint(b, uint64(len(r.fence.LeaseID)))
	b = append(b, r.fence.LeaseID...)
	if len(r.attempts) > 0 {
		b = binary.AppendUvarint(b, uint64(len(r.attempts)))
		for _, a := range r.attempts {
			b = binary.AppendUvarint(b, uint64(len(a)))
			b = append(b, a...)
		}
	}
	return append(b, r.value...)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 11 || b[0] != recMagic || (b[1] != recVersion && b[1] != recVersionAttempt) {
		return r, ErrCorrupt
	}
	r.fence.Token = fence.Token(binary.BigEndian.Uint64(b[2:10]))
	r.hasValue = b[10]&flagValue != 0
	rest := b[11:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return "", false
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, true
	}
	var ok1, ok2 bool
	r.fence.Name, ok1 = str()
	r.fence.LeaseID, ok2 = str()
	if !ok1 || !ok2 || r.fence.Validate() != nil {
		return record{}, ErrCorrupt
	}
	if b[1] == recVersionAttempt {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n == 0 || n > uint64(len(rest)) {
			return record{}, ErrCorrupt
		}
		rest = rest[k:]
		r.attempts = make([]string, 0, n)
		for range n {
			a, ok := str()
			if !ok || !validAttempt(a) {
				return record{}, ErrCorrupt
			}
			r.attempts = append(r.attempts, a)
		}
	}
	if r.hasValue {
		r.value = bytes.Clone(rest)
		if r.value == nil {
			r.value = []byte{}
		}
	} else if len(rest) != 0 {
		return record{}, ErrCorrupt
	}
	return r, nil
}

// Put stores value under key if f is admitted (see fence.Admit) and records f as the
// key's fence, in one etcd transaction. It returns a *fence.StaleTokenError
// (fence.ErrStaleToken) or *fence.NamespaceError (fence.ErrNamespace) if f is refused,
// and on a Store's KV a *fence.UnissuedTokenError (fence.ErrUnissuedToken) if f was
// never issued, or a *fence.LeaseRequiredError (fence.ErrLeaseRequired) if f has no
// lease id and its token is a live lease's (P9); in each case nothing changed. It returns fence.ErrInvalid for a
// bad key or fence or a value over MaxValueSize; ErrCorrupt if the stored record is
// not one this package wrote; fence.ErrUnavailable if etcd cannot be reached (the
// write may or may not have been applied) and fence.ErrClosed after the Store is
// closed.
//
// A Put whose context names its write by an attempt id (fence.WithWriteAttempt)
// claims the id in the record it writes; a later attempt with the same id and f,
// while f is still key's fence, returns nil and writes nothing, also when it
// finds the record changed and reads it anew (P3). A malformed id is
// fence.ErrInvalid.
func (s *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	attempt, err := fence.AttemptKey(ctx, "put", value)
	if err != nil {
		return fmt.Errorf("etcd: put %q: %w", key, err)
	}
	if err := s.update(ctx, key, f, attempt, len(value), func(r *record) (bool, error) {
		r.hasValue, r.value = true, value
		return true, nil
	}); err != nil {
		return fmt.Errorf("etcd: put %q: %w", key, err)
	}
	return nil
}

// Delete removes key's value if f is admitted, as Put admits it (P9 included on a
// Store's KV), and records f as the key's fence in the same etcd transaction: the
// fence stays, so a stale writer is still refused, and Get returns the key with a
// nil value. It returns the refusals of Put first, then fence.ErrNotFound if key
// holds no value (never written, only fenced or already deleted); in each case
// nothing changed. Its other errors are Put's. An attempt id claims and
// replays as in Put: a later attempt of an applied Delete returns nil.
func (s *KV) Delete(ctx context.Context, key string, f fence.Fence) error {
	attempt, err := fence.AttemptKey(ctx, "delete", nil)
	if err != nil {
		return fmt.Errorf("etcd: delete %q: %w", key, err)
	}
	if err := s.update(ctx, key, f, attempt, 0, func(r *record) (bool, error) {
		if !r.hasValue {
			return false, fence.ErrNotFound
		}
		r.hasValue, r.value = false, nil
		return true, nil
	}); err != nil {
		return fmt.Errorf("etcd: delete %q: %w", key, err)
	}
	return nil
}

// Fence advances key's fence to f without changing its data (see fence.Guard). It
// returns nil if f was accepted or already is the key's fence, a
// *fence.StaleTokenError or *fence.NamespaceError if it is refused, and on a Store's
// KV a *fence.UnissuedTokenError if f was never issued or a
// *fence.LeaseRequiredError if it has no lease id and a live lease's token (P9);
// fence.ErrInvalid for a
// bad key or fence, ErrCorrupt for a record this package did not write,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (s *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	// No attempt id: a late Fence at the key's fence changes nothing.
	if err := s.update(ctx, key, f, "", 0, func(r *record) (bool, error) {
		return r.fence != f, nil // already fenced at f: nothing to write
	}); err != nil {
		return fmt.Errorf("etcd: fence %q: %w", key, err)
	}
	return nil
}

// Purge removes key's value and fence in one etcd delete (see fence.Purger), so the
// next write under any lock and token is admitted: the one way a key's fence goes
// back, for an administrator. It returns fence.ErrNotFound if key has neither a
// value nor a fence, fence.ErrInvalid for a bad key, fence.ErrUnavailable if etcd
// cannot be reached and fence.ErrClosed after Close.
func (s *KV) Purge(ctx context.Context, key string) error {
	if s.closed.Load() {
		return fmt.Errorf("etcd: purge %q: %w", key, fence.ErrClosed)
	}
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("etcd: purge %q: %w", key, err)
	}
	resp, err := s.cli.Delete(ctx, s.keys.kv(key))
	if err != nil {
		return fmt.Errorf("etcd: purge %q: %w", key, storeErr(err))
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("etcd: purge %q: %w", key, fence.ErrNotFound)
	}
	return nil
}

// update checks its arguments (ErrClosed, then ErrInvalid for a bad key, fence or a
// value of size bytes over MaxValueSize) and applies change to key's record if f is
// admitted: read, Admit (and on a Store's KV, P9's check), then write only if the
// record's mod revision is still the one read and f's token is still at or below
// the last token of f.Name; if either compare fails, the transaction returns the
// reads anew and the check runs again. change reports whether there is anything
// to write, or an error that ends the call with nothing written.
//
// A write named by attempt (fence.WithWriteAttempt; "" for none) claims it in
// the record it writes; one whose attempt the record remembers under f, as read
// (or read anew after a failed compare), is the write already applied: update
// returns nil with nothing written (P3).
func (s *KV) update(ctx context.Context, key string, f fence.Fence, attempt string, size int, change func(*record) (bool, error)) error {
	if s.closed.Load() {
		return fence.ErrClosed
	}
	if err := fence.ValidateKey(key); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if size > MaxValueSize {
		return invalid("value", fmt.Sprintf("%d bytes", size), fmt.Sprintf("is longer than %d bytes", MaxValueSize))
	}
	k := s.keys.kv(key)
	reads := s.reads(k, f.Name)
	resp, err := s.cli.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return storeErr(err)
	}
	rs := resp.Responses
	for {
		kvs := rs[0].GetResponseRange().GetKvs()
		var cur record
		var rev int64
		if len(kvs) == 1 {
			if cur, err = decodeRecord(kvs[0].Value); err != nil {
				return err
			}
			rev = kvs[0].ModRevision
		}
		if s.issued {
			if err := s.checkIssued(f, rs[1:]); err != nil {
				return err
			}
		}
		if fence.Replayed(cur.fence, cur.attempts, f, attempt) {
			return nil // this write's earlier attempt was applied (P3)
		}
		if err := fence.Admit(key, cur.fence, f); err != nil {
			return err
		}
		next := cur
		if ok, err := change(&next); err != nil || !ok {
			return err
		}
		next.attempts = fence.RememberAttempt(cur.fence, cur.attempts, f, attempt)
		next.fence = f
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", rev)}
		if s.issued {
			// The token record's mod revision is the name's last token: f's token
			// is at most that, as the read found (it only grows; this compare makes
			// the check part of the write all the same).
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.keys.token(f.Name)), ">", int64(f.Token)-1))
		}
		tr, err := s.cli.Txn(ctx).
			If(cmps...).
			Then(clientv3.OpPut(k, string(next.encode()))).
			Else(reads...).
			Commit()
		if err != nil {
			return storeErr(err)
		}
		if tr.Succeeded {
			return nil
		}
		rs = tr.Responses
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
		}
	}
}

// reads returns the reads update decides on: the record at k and, on a Store's
// KV, name's token record, lock key and holder keys.
func (s *KV) reads(k, name string) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpGet(k)}
	if s.issued {
		hFrom, hTo := s.keys.holders(name)
		ops = append(ops,
			clientv3.OpGet(s.keys.token(name)),
			clientv3.OpGet(s.keys.lock(name)),
			clientv3.OpGet(hFrom, clientv3.WithRange(hTo)))
	}
	return ops
}

// checkIssued is P9's check of f against the reads of f.Name (its token record, its
// lock key, its holder keys, as reads returns them): a token above the token
// record's mod revision (the last token the name's grants were given), or a name
// with no token record (never granted), is an *fence.UnissuedTokenError; so is a
// lease id other than that of the live lease whose key was created at f's token (a
// token is unique to its grant, so a lease not live any more cannot be told apart
// and is admitted). A fence without a lease id whose token is that of a live
// lease's key is a *fence.LeaseRequiredError: a key read gone never comes back,
// so the write's compares need not repeat this.
func (s *KV) checkIssued(f fence.Fence, rs []*etcdserverpb.ResponseOp) error {
	var last fence.Token
	if tok := only(rs[0].GetResponseRange().GetKvs()); tok != nil {
		last = fence.Token(tok.ModRevision)
	}
	if err := fence.CheckIssued(f, last); err != nil {
		return err
	}
	live := rs[1].GetResponseRange().GetKvs()
	live = append(live[:len(live):len(live)], rs[2].GetResponseRange().GetKvs()...)
	for _, kv := range live {
		if fence.Token(kv.CreateRevision) != f.Token {
			continue
		}
		if f.LeaseID == "" {
			// Its key lives until its etcd lease ends: refused a little
			// longer than the lease lives, never shorter.
			return fence.CheckLeaseGiven(f, true)
		}
		id := string(kv.Value)
		if !bytes.Equal(kv.Key, []byte(s.keys.lock(f.Name))) {
			id, _, _ = strings.Cut(id, "\x00") // a holder key: lease id, "\x00", owner
		}
		if id != f.LeaseID {
			return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: last, OtherLease: true}
		}
	}
	return nil
}

// Get returns the value stored under key and the fence that wrote it. A key only
// fenced (Fence) has a nil value. It returns fence.ErrNotFound if key was never
// written or fenced, fence.ErrInvalid for a bad key, ErrCorrupt for a record this
// package did not write, fence.ErrUnavailable if etcd cannot be reached and
// fence.ErrClosed after Close.
func (s *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if s.closed.Load() {
		return fence.Item{}, fmt.Errorf("etcd: get %q: %w", key, fence.ErrClosed)
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("etcd: get %q: %w", key, err)
	}
	resp, err := s.cli.Get(ctx, s.keys.kv(key))
	if err != nil {
		return fence.Item{}, fmt.Errorf("etcd: get %q: %w", key, storeErr(err))
	}
	if len(resp.Kvs) == 0 {
		return fence.Item{}, fmt.Errorf("etcd: get %q: %w", key, fence.ErrNotFound)
	}
	r, err := decodeRecord(resp.Kvs[0].Value)
	if err != nil {
		return fence.Item{}, fmt.Errorf("etcd: get %q: %w", key, err)
	}
	return fence.Item{Value: r.value, Fence: r.fence}, nil
}

// validAttempt reports whether a is an attempt key as fence.AttemptKey makes
// them: 1 to MaxAttemptIDLen+17 bytes of printable ASCII without spaces.
func validAttempt(a string) bool {
	if a == "" || len(a) > fence.MaxAttemptIDLen+17 {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] <= ' ' || a[i] > '~' {
			return false
		}
	}
	return true
}
