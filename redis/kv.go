package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
)

var (
	//go:embed scripts/issued.lua
	issuedSrc string
	//go:embed scripts/kv_put.lua
	kvPutSrc string
	//go:embed scripts/kv_issued.lua
	kvIssuedSrc string
	//go:embed scripts/kv_get.lua
	kvGetSrc string
	//go:embed scripts/kv_purge.lua
	kvPurgeSrc string

	kvPutScript    = goredis.NewScript(issuedSrc + kvPutSrc)
	kvIssuedScript = goredis.NewScript(issuedSrc + kvIssuedSrc)
	kvGetScript    = goredis.NewScript(kvGetSrc)
	kvPurgeScript  = goredis.NewScript(kvPurgeSrc)
)

var (
	_ fence.KV     = (*KV)(nil)
	_ fence.Guard  = (*KV)(nil)
	_ fence.Purger = (*KV)(nil)
)

// MaxValueLen is the largest value KV.Put stores, in bytes (1 MiB). A larger value
// is refused with an error matching fence.ErrInvalid, before anything is sent.
const MaxValueLen = 1 << 20

// kvSuffix ends the record key of a KV key K: Prefix + "{" + escaped K + "}:kv". The
// hash tag puts the record in one Cluster slot; the suffix keeps it apart from the
// keys of a lock that has the same name.
const kvSuffix = ":kv"

// KV is a fenced key-value store in Redis (fence.KV and fence.Guard): what `fence
// serve --store redis://...` keeps its data in, so servers sharing a Redis share the
// data.
//
// Each key K is one hash, fence:{K}:kv (K escaped as lock names are, see the package
// documentation), with the fields name, token and lease (the highest fence accepted)
// and value (absent while the key was only fenced). Put and Fence run one Lua script
// that reads the stored fence, applies fence.Admit's rule (the stored token compared
// as a number, after checking it is a decimal in [1, fence.MaxToken]) and writes the
// new fence and value, all in one atomic step; there is no read-compare-write window
// between clients or servers. Records never expire and fence never deletes them.
//
// Durability (P3 on Redis): by default an acknowledged Put is in the primary's memory
// only. Redis replicates asynchronously, so a failover to a replica that had not
// received the write loses it, and a restart without AOF (appendonly yes,
// appendfsync always for no loss at all) loses what was not saved. With
// Options.WaitReplicas (and/or WaitAOFLocal, WaitAOFReplicas) a Put or Fence that
// wrote sends WAIT (WAITAOF) after the script on the same connection, and succeeds
// only if enough replicas (fsyncs) acknowledged it; otherwise it returns an error
// matching fence.ErrUnavailable: the write is on the primary and cannot be taken
// back (that would be a write of its own), so its fate is unknown, as that error
// says. The limits of the Locker's WAIT apply (see the package documentation): it
// narrows the loss window, it does not make Redis consistent. On a Cluster the
// pipeline goes to the key's master; a slot that moved meanwhile answers MOVED, and
// the Put returns fence.ErrUnavailable (the script did not run), to be retried.
// Where an acknowledged write must survive the loss of the primary, keep the data
// in a store with synchronous replication (etcd, PostgreSQL).
//
// Issued tokens (P9): a KV made by NewIssuedKV (a Store's) refuses a fence that the
// Lockers of its prefix never issued: see "Fenced KV and issued tokens" in the
// package documentation for what it checks, and docs/redis.md for where a Cluster
// makes the check a read before the write. A
// KV made by NewKV guards with the tokens of any lock and does not check that.
//
// A KV is safe for concurrent use. It does not own its client.
type KV struct {
	client  Client
	prefix  string
	opts    Options     // the WAIT / WAITAOF settings
	issued  bool        // check P9 against the counters of prefix
	cluster bool        // client is a Cluster's: the check is a script of its own, run first
	closed  atomic.Bool // set by Store.Close
}

// NewKV returns a KV that keeps its records in Redis through client, under
// opts.Prefix (default "fence:"), with opts's WaitReplicas, WaitAOFLocal,
// WaitAOFReplicas and WaitTimeout for its writes (see KV); the other options are
// the Locker's. nil means defaults. It returns an error matching fence.ErrInvalid if
// client is nil or an option is out of range, as NewLocker does. It does not
// contact the server.
func NewKV(client Client, opts *Options) (*KV, error) {
	// NewLocker validates and defaults the options shared by both; it has no side
	// effect but the Locker it returns, which is dropped.
	l, err := NewLocker(client, opts)
	if err != nil {
		return nil, fmt.Errorf("redis: new kv: %w", errors.Unwrap(err))
	}
	return &KV{client: client, prefix: l.prefix, opts: l.opts}, nil
}

// NewIssuedKV is NewKV for a KV that also refuses fences the Lockers on the same
// client and opts.Prefix never issued (P9), as a Store's KV does: a token above
// its lock name's counter, a name with no counter (never granted), or a lease id
// other than that of the live lease holding the token. It returns NewKV's errors.
func NewIssuedKV(client Client, opts *Options) (*KV, error) {
	kv, err := NewKV(client, opts)
	if err != nil {
		return nil, err
	}
	kv.issued = true
	_, kv.cluster = client.(masterForKeyer)
	return kv, nil
}

func (s *KV) recordKey(key string) string {
	return s.prefix + "{" + escapeName(key) + "}" + kvSuffix
}

// Put stores value under key if f is admitted (see fence.Admit) and records f as the
// key's fence, in one script. It returns a *fence.StaleTokenError (matching
// fence.ErrStaleToken, carrying the highest token accepted) or a
// *fence.NamespaceError (fence.ErrNamespace) if f is refused, and on a KV of
// NewIssuedKV a *fence.UnissuedTokenError (fence.ErrUnissuedToken) if f was never
// issued, or a *fence.LeaseRequiredError (fence.ErrLeaseRequired) if f has no lease
// id and its token is a live lease's; in each case nothing changed. It returns fence.ErrInvalid for a bad key or fence or a value over MaxValueLen;
// ErrWrongType if the record key holds data this package did not write (it is left
// alone); fence.ErrUnavailable if Redis cannot be reached (the write may or may not
// have been applied); and fence.ErrClosed after the Store was closed.
//
// A Put whose context names its write by an attempt id (fence.WithWriteAttempt)
// claims the id in the key's record, in the same script; a later attempt with the
// same id and f, while f is still key's fence, returns nil and writes nothing (P3).
// A malformed id is fence.ErrInvalid.
func (s *KV) Put(ctx context.Context, key string, value []byte, f fence.Fence) error {
	if err := s.check(key, f); err != nil {
		return fmt.Errorf("redis: put %q: %w", key, err)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("redis: put %q: %w", key, &fence.InvalidError{
			Field: "value", Value: fmt.Sprintf("%d bytes", len(value)),
			Reason: fmt.Sprintf("is longer than %d bytes", MaxValueLen),
		})
	}
	attempt, err := fence.AttemptKey(ctx, "put", value)
	if err != nil {
		return fmt.Errorf("redis: put %q: %w", key, err)
	}
	if err := s.admit(ctx, key, f, "1", value, attempt); err != nil {
		return fmt.Errorf("redis: put %q: %w", key, err)
	}
	return nil
}

// Delete removes key's value if f is admitted, as Put admits it (P9 included on a
// KV of NewIssuedKV), and records f as the key's fence, in one script: the fence
// stays, so a stale writer is still refused, and Get returns the key with a nil
// value. It returns Put's refusals first, then fence.ErrNotFound if key holds no
// value (never written, only fenced or already deleted); in each case nothing
// changed. Its other errors are Put's. An attempt id claims and replays as in
// Put: a later attempt of an applied Delete returns nil.
func (s *KV) Delete(ctx context.Context, key string, f fence.Fence) error {
	if err := s.check(key, f); err != nil {
		return fmt.Errorf("redis: delete %q: %w", key, err)
	}
	attempt, err := fence.AttemptKey(ctx, "delete", nil)
	if err != nil {
		return fmt.Errorf("redis: delete %q: %w", key, err)
	}
	if err := s.admit(ctx, key, f, "2", nil, attempt); err != nil {
		return fmt.Errorf("redis: delete %q: %w", key, err)
	}
	return nil
}

// Purge deletes key's record, its value and its fence (see fence.Purger), so the
// next write under any lock and token is admitted: the one way a key's fence goes
// back, for an administrator. It returns fence.ErrNotFound if key has no record,
// fence.ErrInvalid for a bad key, ErrWrongType if the record key holds data this
// package did not write (left alone), fence.ErrUnavailable if Redis cannot be
// reached and fence.ErrClosed after the Store was closed.
func (s *KV) Purge(ctx context.Context, key string) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: purge %q: %w", key, fence.ErrClosed)
	}
	if err := fence.ValidateKey(key); err != nil {
		return fmt.Errorf("redis: purge %q: %w", key, err)
	}
	n, err := kvPurgeScript.Run(ctx, s.client, []string{s.recordKey(key)}).Int64()
	if err != nil {
		return fmt.Errorf("redis: purge %q: %w", key, kvTranslate(err))
	}
	if n == 0 {
		return fmt.Errorf("redis: purge %q: %w", key, fence.ErrNotFound)
	}
	return nil
}

// Fence advances key's fence to f without changing its value (see fence.Guard), so a
// new holder fences off a paused predecessor before its first write. It returns nil
// if f was accepted or already is the key's fence; a *fence.StaleTokenError,
// *fence.NamespaceError or (NewIssuedKV) *fence.UnissuedTokenError or
// *fence.LeaseRequiredError if it is refused; and otherwise the errors of Put.
func (s *KV) Fence(ctx context.Context, key string, f fence.Fence) error {
	if err := s.check(key, f); err != nil {
		return fmt.Errorf("redis: fence %q: %w", key, err)
	}
	if err := s.admit(ctx, key, f, "0", nil, ""); err != nil {
		return fmt.Errorf("redis: fence %q: %w", key, err)
	}
	return nil
}

func (s *KV) check(key string, f fence.Fence) error {
	if s.closed.Load() {
		return fence.ErrClosed
	}
	if err := fence.ValidateKey(key); err != nil {
		return err
	}
	return f.Validate()
}

// admit runs the kv_put script in mode ("1" store value, "0" fence only, "2"
// delete the value) and turns its reply into fence's errors. With P9's check, the
// script reads the name's keys too, or on a Cluster the kv_issued script does first.
// attempt is the write's attempt id ("" for none), which the script claims in the
// key's record, or finds claimed under f and answers as admitted with nothing
// written (P3).
func (s *KV) admit(ctx context.Context, key string, f fence.Fence, mode string, value []byte, attempt string) error {
	if value == nil {
		value = []byte{}
	}
	tok := strconv.FormatUint(uint64(f.Token), 10)
	keys := []string{s.recordKey(key)}
	if s.issued {
		nk := nameKeys(s.prefix, f.Name)
		if s.cluster {
			res, err := kvIssuedScript.Run(ctx, s.client, []string{nk.token, nk.lock, nk.holders}, tok, f.LeaseID).Result()
			if err != nil {
				return kvTranslate(err)
			}
			if err := kvReply(res, key, f); err != nil {
				return err
			}
		} else {
			keys = append(keys, nk.token, nk.lock, nk.holders)
		}
	}
	args := []any{f.Name, tok, f.LeaseID, mode, value, attempt}
	res, problem, err := runWrite(ctx, s.client, &s.opts, kvPutScript, keys, args, false)
	if err != nil {
		return kvTranslate(err)
	}
	if err := kvReply(res, key, f); err != nil {
		return err
	}
	if problem != "" {
		return fmt.Errorf("%w: written on the primary, but %s; a failover may lose it", fence.ErrUnavailable, problem)
	}
	return nil
}

// kvReply turns a reply of kv_put or kv_issued for f on key into nil (admitted) or
// fence's errors.
func kvReply(res any, key string, f fence.Fence) error {
	a, ok := res.([]any)
	if !ok || len(a) == 0 {
		return fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
	}
	code, ok := a[0].(int64)
	if !ok {
		return fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
	}
	switch {
	case code == 0:
		return nil
	case code == 4 && len(a) == 1:
		return fence.ErrNotFound
	case code == 5 && len(a) == 1:
		return &fence.LeaseRequiredError{Lock: f.Name, Token: f.Token}
	case code == 3 && len(a) == 3:
		lastText, ok1 := a[1].(string)
		other, ok2 := a[2].(int64)
		last, err := strconv.ParseUint(lastText, 10, 64)
		if !ok1 || !ok2 || err != nil {
			break
		}
		return &fence.UnissuedTokenError{Lock: f.Name, Token: f.Token, Last: fence.Token(last), OtherLease: other == 1}
	case len(a) != 2:
		break
	default:
		detail, ok := a[1].(string)
		if !ok {
			break
		}
		return kvRefusal(code, detail, key, f, res)
	}
	return fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
}

// kvRefusal turns kv_put's stale (1) and namespace (2) replies into fence's errors.
func kvRefusal(code int64, detail, key string, f fence.Fence, res any) error {
	switch code {
	case 1:
		highest, err := fence.ParseToken(detail)
		if err != nil {
			return fmt.Errorf("%w: script replied stale with highest token %q", fence.ErrUnavailable, detail)
		}
		return &fence.StaleTokenError{Resource: key, Token: f.Token, Highest: highest, SameToken: f.Token == highest}
	case 2:
		return &fence.NamespaceError{Resource: key, Want: detail, Got: f.Name}
	}
	return fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
}

// Get returns the value stored under key and the fence that wrote it (the key's
// highest fence). A key that was only fenced has a nil Value. It returns
// fence.ErrNotFound if key was never written or fenced, fence.ErrInvalid for a bad
// key, ErrWrongType if the record key holds data this package did not write,
// fence.ErrUnavailable if Redis cannot be reached, and fence.ErrClosed after the
// Store was closed.
func (s *KV) Get(ctx context.Context, key string) (fence.Item, error) {
	if s.closed.Load() {
		return fence.Item{}, fmt.Errorf("redis: get %q: %w", key, fence.ErrClosed)
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Item{}, fmt.Errorf("redis: get %q: %w", key, err)
	}
	rk := s.recordKey(key)
	res, err := kvGetScript.Run(ctx, s.client, []string{rk}).Slice()
	if err != nil {
		return fence.Item{}, fmt.Errorf("redis: get %q: %w", key, kvTranslate(err))
	}
	it, err := kvGetReply(res, rk)
	if err != nil {
		return fence.Item{}, fmt.Errorf("redis: get %q: %w", key, err)
	}
	return it, nil
}

// kvGetReply decodes the reply of the kv_get script for the record key rk: {0} for
// no record, else {1, name, token, lease, has value, value}. It returns
// fence.ErrNotFound for {0}, an error matching fence.ErrUnavailable for a reply
// of another shape, and one matching ErrWrongType for a fence this package did
// not write.
func kvGetReply(res []any, rk string) (fence.Item, error) {
	if len(res) == 1 && res[0] == int64(0) {
		return fence.Item{}, fence.ErrNotFound
	}
	if len(res) != 6 {
		return fence.Item{}, fmt.Errorf("%w: unexpected script reply of %d elements", fence.ErrUnavailable, len(res))
	}
	name, ok1 := res[1].(string)
	tokText, ok2 := res[2].(string)
	lease, ok3 := res[3].(string)
	hasValue, ok4 := res[4].(int64)
	value, ok5 := res[5].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return fence.Item{}, fmt.Errorf("%w: unexpected script reply", fence.ErrUnavailable)
	}
	tok, err := fence.ParseToken(tokText)
	f := fence.Fence{Name: name, Token: tok, LeaseID: lease}
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		return fence.Item{}, fmt.Errorf("record key %s holds a fence this package did not write (%v): %w", rk, err, ErrWrongType)
	}
	it := fence.Item{Fence: f}
	if hasValue == 1 {
		it.Value = make([]byte, len(value)) // non-nil even when empty: the key was written
		copy(it.Value, value)
	}
	return it, nil
}

// kvTranslate is translate for the KV scripts, which also reply FENCE_INVALID (only
// if a token got past Go's validation, which would be a bug: fail closed).
func kvTranslate(err error) error {
	var rerr goredis.Error
	if errors.As(err, &rerr) && strings.Contains(rerr.Error(), "FENCE_INVALID ") {
		return fmt.Errorf("%w: server refused: %s", fence.ErrInvalid, rerr.Error())
	}
	return translate(err)
}
