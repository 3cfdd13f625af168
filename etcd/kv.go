package etcd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

// MaxValueSize is the largest value KV.Put accepts, in bytes. etcd refuses requests
// above 1.5 MiB by default (--max-request-bytes); this leaves room for the fence.
const MaxValueSize = 1 << 20

// KV is a fenced key-value store in etcd (fence.KV and fence.Guard). Each key is one
// etcd key under Options.Prefix+"kv/" whose value holds the key's highest fence and
// its data, so the fence and the data change in one etcd write. A Put reads the
// record, applies fence.Admit, and writes with a transaction that compares the
// record's mod revision: a concurrent change makes it re-check against the new
// record, so no write is ever admitted against a fence that is no longer the
// highest. It is safe for concurrent use, also across processes.
type KV struct {
	cli    *clientv3.Client
	keys   keys
	closed atomic.Bool
}

var (
	_ fence.KV    = (*KV)(nil)
	_ fence.Guard = (*KV)(nil)
)

// NewKV returns a KV that keeps its data in etcd through cli, under opts.Prefix. The
// caller keeps ownership of cli.
func NewKV(cli *clientv3.Client, opts *Options) *KV {
	return &KV{cli: cli, keys: keys{opts.prefix()}}
}

// record is what a KV key holds.
type record struct {
	fence    fence.Fence
	hasValue bool
	value    []byte
}

// Record encoding: magic 'F', version 1, token (8 bytes big-endian), flags (1: has a
// value), uvarint length + lock name, uvarint length + lease id, then the value.
const (
	recMagic   = 'F'
	recVersion = 1
	flagValue  = 1
)

func (r record) encode() []byte {
	b := make([]byte, 0, 2+8+1+2*binary.MaxVarintLen64+len(r.fence.Name)+len(r.fence.LeaseID)+len(r.value))
	b = append(b, recMagic, recVersion)
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
	return append(b, r.value...)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 11 || b[0] != recMagic || b[1] != recVersion {
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
// in which case nothing changed; fence.ErrInvalid for a bad key or fence or a value
// over MaxValueSize; ErrCorrupt if the stored record is not one this package wrote;
// fence.ErrUnavailable if etcd cannot be reached (the write may or may not have been
// applied) and fence.ErrClosed after the Store is closed.
func (s *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := s.update(ctx, key, f, len(value), func(r *record) bool {
		r.hasValue, r.value = true, value
		return true
	}); err != nil {
		return fmt.Errorf("etcd: put %q: %w", key, err)
	}
	return nil
}

// Fence advances key's fence to f without changing its data (see fence.Guard). It
// returns nil if f was accepted or already is the key's fence, a
// *fence.StaleTokenError or *fence.NamespaceError if it is refused, fence.ErrInvalid
// for a bad key or fence, ErrCorrupt for a record this package did not write,
// fence.ErrUnavailable if etcd cannot be reached and fence.ErrClosed after Close.
func (s *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	if err := s.update(ctx, key, f, 0, func(r *record) bool {
		return r.fence != f // already fenced at f: nothing to write
	}); err != nil {
		return fmt.Errorf("etcd: fence %q: %w", key, err)
	}
	return nil
}

// update checks its arguments (ErrClosed, then ErrInvalid for a bad key, fence or a
// value of size bytes over MaxValueSize) and applies change to key's record if f is
// admitted: read, Admit, then write only if the record's mod revision is still the
// one read; on a conflict, the transaction returns the new record and the check
// runs again. change reports whether there is anything to write.
func (s *KV) update(ctx context.Context, key string, f fence.Fence, size int, change func(*record) bool) error {
	if s.closed.Load() {
		return fence.ErrClosed
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if size > MaxValueSize {
		return invalid("value", fmt.Sprintf("%d bytes", size), fmt.Sprintf("is longer than %d bytes", MaxValueSize))
	}
	k := s.keys.kv(key)
	resp, err := s.cli.Get(ctx, k)
	if err != nil {
		return storeErr(err)
	}
	kvs := resp.Kvs
	for {
		var cur record
		var rev int64
		if len(kvs) == 1 {
			if cur, err = decodeRecord(kvs[0].Value); err != nil {
				return err
			}
			rev = kvs[0].ModRevision
		}
		if err := fence.Admit(key, cur.fence, f); err != nil {
			return err
		}
		next := cur
		if !change(&next) {
			return nil
		}
		next.fence = f
		tr, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, string(next.encode()))).
			Else(clientv3.OpGet(k)).
			Commit()
		if err != nil {
			return storeErr(err)
		}
		if tr.Succeeded {
			return nil
		}
		kvs = tr.Responses[0].GetResponseRange().GetKvs()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", fence.ErrUnavailable, err)
		}
	}
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
	if err := driver.ValidateKey(key); err != nil {
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
