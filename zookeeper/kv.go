package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

var (
	_ fence.KV     = (*KV)(nil)
	_ fence.Guard  = (*KV)(nil)
	_ fence.Purger = (*KV)(nil)
)

// MaxValueSize is the largest value KV.Put accepts (512 KiB). ZooKeeper refuses znode
// data above its jute.maxbuffer (about 1 MiB by default), and the record holds the
// value base64-encoded (4/3 of its size) next to the fences.
const MaxValueSize = 512 << 10

// maxCASAttempts bounds the read-Admit-CAS loop of one Put or Fence. Every failed
// attempt means another writer's conditional write to the same key succeeded in
// between, so the bound is only reached under extreme contention on one key.
const maxCASAttempts = 100

// KV is a fenced key-value store (fence.KV) and guard (fence.Guard) on ZooKeeper.
//
// Each key is one persistent znode under the KV root, named with the same encoding as
// the lock directories ("jobs/x" is "jobs%2Fx"). The KV root is derived from
// Options.Root: a root ending in "/locks" has it replaced by "/kv" (the default
// /fence/locks gives /fence/kv), any other root gets "-kv" appended (/myapp gives
// /myapp-kv). The znode's data is a JSON record
//
//	{"fence":{"name":..,"token":..,"lease":..},"writer":{...},"value":"<base64>"}
//
// where fence is the highest fence admitted for the key, writer the fence of the Put
// that stored value (absent for a key that was only fenced) and value absent for a
// key that was only fenced. "attempts" (absent for none) are the attempt ids of the
// puts and deletes applied under fence (fence.RememberAttempt): a Put or Delete
// whose context names it by one of them, with that fence, returns nil and writes
// nothing, so a late attempt never replaces a later write of the holder (P3).
//
// Put and Fence read the record and its version, apply fence.Admit, and write with
// Set(path, data, version), or Create when the key has no znode; a concurrent writer
// makes the write fail with ErrBadVersion or ErrNodeExists, and the loop starts over
// with a fresh read. The check, the new fence and the value thus change in one
// ZooKeeper transaction. It is safe for concurrent use and across processes.
//
// The KV of a Store also refuses fences its Locker never issued, within the bound
// the package documentation gives (see "Fenced KV and issued tokens"); a KV made
// by NewKV guards with the tokens of any lock and checks no issuance.
type KV struct {
	conn   *zk.Conn
	root   string
	acl    []zk.ACL
	locker *Locker // the Store's Locker, whose grants P9 checks against; nil: none

	closed atomic.Bool // set by Store.Close
}

// record is the data of a key's znode.
type record struct {
	Fence  fence.Fence  `json:"fence"`
	Writer *fence.Fence `json:"writer,omitempty"`
	Value  []byte       `json:"value,omitempty"`
	// Attempts are the attempt ids applied under Fence, oldest first.
	Attempts []string `json:"attempts,omitempty"`
}

// NewKV returns a KV that uses conn (which it never closes) with the KV root derived
// from opts.Root and opts.ACL (see KV). It returns an error matching fence.ErrInvalid
// for a nil conn or a bad root.
func NewKV(conn *zk.Conn, opts *Options) (*KV, error) {
	o, err := opts.resolve("new kv", conn)
	if err != nil {
		return nil, err
	}
	return &KV{conn: conn, root: kvRoot(o.Root), acl: o.ACL}, nil
}

// kvRoot is the KV root for the lock root root (see KV).
func kvRoot(root string) string {
	if base, ok := strings.CutSuffix(root, "/locks"); ok && base != "" {
		return base + "/kv"
	}
	return root + "-kv"
}

// Root returns the znode under which the KV keeps its keys.
func (kv *KV) Root() string { return kv.root }

// Put stores value under key if f is admitted (fence.Admit against the key's highest
// fence) and records f as the key's fence. It returns a *fence.StaleTokenError or
// *fence.NamespaceError if f is refused, and on a Store's KV a
// *fence.UnissuedTokenError or *fence.LeaseRequiredError (P9) (nothing changed), fence.ErrInvalid for a bad
// key or fence or a value above MaxValueSize, fence.ErrUnavailable if ZooKeeper does
// not answer or the key stayed contended for maxCASAttempts writes, fence.ErrClosed
// after the connection was closed, and ctx's error if ctx ends between attempts.
// A Put named by an attempt id (fence.WithWriteAttempt) claims it in the key's
// record; a later attempt with the same id and f, while f is still key's fence,
// returns nil and writes nothing (P3). A malformed id is fence.ErrInvalid.
func (kv *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if len(value) > MaxValueSize {
		return fmt.Errorf("zookeeper: put %q: %w", key, &fence.InvalidError{Field: "value", Value: fmt.Sprintf("%d bytes", len(value)), Reason: fmt.Sprintf("is larger than %d bytes", MaxValueSize)})
	}
	if value == nil {
		value = []byte{} // a written key always has a value, so Get tells it from a fenced one
	}
	attempt, err := fence.AttemptKey(ctx, "put", value)
	if err != nil {
		return fmt.Errorf("zookeeper: put %q: %w", key, err)
	}
	return kv.update(ctx, "put", key, f, attempt, func(r *record) error {
		w := f
		r.Writer = &w
		r.Value = value
		return nil
	})
}

// Delete removes key's value if f is admitted, as Put admits it (P9 included on a
// Store's KV), and records f as the key's fence, in one conditional write: the
// fence stays, so a stale writer is still refused, and Get returns the key with a
// nil value and that fence. It returns Put's refusals first, then
// fence.ErrNotFound if key holds no value (never written, only fenced or already
// deleted); in each case nothing changed. Its other errors are Put's. An attempt
// id claims and replays as in Put: a later attempt of an applied Delete returns nil.
func (kv *KV) Delete(ctx context.Context, key string, f fence.Fence) error {
	attempt, err := fence.AttemptKey(ctx, "delete", nil)
	if err != nil {
		return fmt.Errorf("zookeeper: delete %q: %w", key, err)
	}
	return kv.update(ctx, "delete", key, f, attempt, func(r *record) error {
		if r.Writer == nil {
			return fence.ErrNotFound
		}
		r.Writer, r.Value = nil, nil
		return nil
	})
}

// Fence advances key's fence to f without changing its value. It returns nil if f is
// admitted, a *fence.StaleTokenError or *fence.NamespaceError if not (and on a
// Store's KV a *fence.UnissuedTokenError or *fence.LeaseRequiredError), and
// otherwise the errors of Put.
func (kv *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	return kv.update(ctx, "fence", key, f, "", nil)
}

// Purge deletes key's znode, its value and its fence (see fence.Purger), so the
// next write under any lock and token is admitted: the one way a key's fence goes
// back, for an administrator. It returns fence.ErrNotFound if key has no znode,
// fence.ErrInvalid for a bad key, fence.ErrUnavailable if ZooKeeper does not
// answer, fence.ErrClosed after the connection was closed, and ctx's error if ctx
// is done.
func (kv *KV) Purge(ctx context.Context, key string) error {
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("zookeeper: purge: %w", err)
	}
	if err := kv.check(ctx); err != nil {
		return fmt.Errorf("zookeeper: purge %q: %w", key, err)
	}
	err := kv.conn.Delete(kv.path(key), -1)
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("zookeeper: purge %q: %w", key, fence.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("zookeeper: purge %q: %w", key, zkErr(err))
	}
	return nil
}

// update runs the read-Admit-CAS loop: it checks f was issued (on a Store's KV),
// admits f against key's record, applies change (if any; its error ends the call
// with nothing written) and writes the record conditionally on the version it
// read. A write named by attempt ("" for none) that the record remembers under
// f, as read on any turn of the loop, is the write already applied: update
// returns nil with nothing written (P3).
func (kv *KV) update(ctx context.Context, op, key string, f fence.Fence, attempt string, change func(*record) error) error {
	if err := driver.ValidateFence(key, f); err != nil {
		return fmt.Errorf("zookeeper: %s: %w", op, err)
	}
	path := kv.path(key)
	for range maxCASAttempts {
		if err := kv.check(ctx); err != nil {
			return fmt.Errorf("zookeeper: %s %q: %w", op, key, err)
		}
		if kv.locker != nil {
			if err := kv.locker.checkIssued(f); err != nil {
				return fmt.Errorf("zookeeper: %s %q: %w", op, key, err)
			}
		}
		data, st, err := kv.conn.Get(path)
		exists := err == nil
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("zookeeper: %s %q: %w", op, key, zkErr(err))
		}
		var r record
		if exists {
			if r, err = decodeRecord(data); err != nil {
				return fmt.Errorf("zookeeper: %s %q: %w", op, key, err)
			}
		}
		if exists && fence.Replayed(r.Fence, r.Attempts, f, attempt) {
			return nil // this write's earlier attempt was applied (P3)
		}
		if err := fence.Admit(key, r.Fence, f); err != nil {
			return fmt.Errorf("zookeeper: %s %q: %w", op, key, err)
		}
		if change == nil && exists && r.Fence == f {
			return nil // already this fence: nothing to write
		}
		r.Attempts = fence.RememberAttempt(r.Fence, r.Attempts, f, attempt)
		r.Fence = f
		if change != nil {
			if err := change(&r); err != nil {
				return fmt.Errorf("zookeeper: %s %q: %w", op, key, err)
			}
		}
		out, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("zookeeper: %s %q: encode record: %w", op, key, err)
		}
		if exists {
			_, err = kv.conn.Set(path, out, st.Version)
		} else {
			err = kv.create(path, out)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrNoNode):
			continue // another writer got in between (or the key was deleted): read again
		default:
			return fmt.Errorf("zookeeper: %s %q: %w", op, key, zkErr(err))
		}
	}
	return fmt.Errorf("zookeeper: %s %q: %w: still contended after %d attempts", op, key, fence.ErrUnavailable, maxCASAttempts)
}

// create makes the key's znode, creating the KV root first if it is missing. It
// returns zk.ErrNodeExists if another writer created the key first.
func (kv *KV) create(path string, data []byte) error {
	_, err := kv.conn.Create(path, data, 0, kv.acl)
	if !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if err := ensurePath(kv.conn, kv.acl, kv.root); err != nil {
		return err
	}
	_, err = kv.conn.Create(path, data, 0, kv.acl)
	return err
}

// Get returns the value stored under key and the fence of the Put that stored it. For
// a key that was only fenced it returns a nil value with the key's fence. It returns
// fence.ErrNotFound for a key never written or fenced, fence.ErrInvalid for a bad key
// or a znode whose data is not a KV record, fence.ErrUnavailable if ZooKeeper does not
// answer and fence.ErrClosed after the connection was closed.
func (kv *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("zookeeper: get: %w", err)
	}
	if err := kv.check(ctx); err != nil {
		return fence.Item{}, fmt.Errorf("zookeeper: get %q: %w", key, err)
	}
	data, _, err := kv.conn.Get(kv.path(key))
	if errors.Is(err, zk.ErrNoNode) {
		return fence.Item{}, fmt.Errorf("zookeeper: get %q: %w", key, fence.ErrNotFound)
	}
	if err != nil {
		return fence.Item{}, fmt.Errorf("zookeeper: get %q: %w", key, zkErr(err))
	}
	r, err := decodeRecord(data)
	if err != nil {
		return fence.Item{}, fmt.Errorf("zookeeper: get %q: %w", key, err)
	}
	if r.Writer == nil {
		return fence.Item{Fence: r.Fence}, nil
	}
	return fence.Item{Value: r.Value, Fence: *r.Writer}, nil
}

// check returns fence.ErrClosed after Store.Close and ctx's error once it is done.
func (kv *KV) check(ctx context.Context) error {
	if kv.closed.Load() {
		return fence.ErrClosed
	}
	return ctx.Err()
}

func (kv *KV) path(key string) string { return kv.root + "/" + encodeName(key) }

// decodeRecord parses a key's znode data; anything else (a znode written by another
// program) is refused with fence.ErrInvalid rather than overwritten.
func decodeRecord(data []byte) (record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil || r.Fence.Validate() != nil || (r.Writer != nil && r.Writer.Validate() != nil) {
		v := string(data)
		return record{}, &fence.InvalidError{Field: "record", Value: v, Reason: "is not a fence KV record"}
	}
	if r.Writer != nil && r.Value == nil {
		r.Value = []byte{}
	}
	return r, nil
}
