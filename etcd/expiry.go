package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fast expiry (Options.FastExpiry; docs/etcd.md, "Fast expiry"). Every lease's key
// (the lock key or a holder key) has a beat key, written with it by the grant,
// under the same etcd lease, and written again by every renewal:
//
//	beat/NAME                      the lock key's
//	beat/NAME\x00h<KIND>\x00<SLOT>  a holder key's
//
// Its value is the TTL, in milliseconds (beatWidth digits), that a waiter waits
// from its mod revision. The holder's deadline runs from the moment it sent the
// grant or renewal, which is before etcd applied it; a waiter starts its wait when
// it sees the revision, which is after. So a waiter that has seen no newer revision
// for the TTL (plus silence's margin) on its own monotonic clock knows the holder's
// deadline has passed on the holder's clock, as long as the two clocks' rates
// differ by less than the margin's share. It then deletes the key and its beat in
// a transaction that compares the beat's mod revision with the one it saw: a
// renewal applied meanwhile makes the delete fail, and a renewal sent before the
// delete but applied after it finds the key gone (fence.ErrNotHeld) and so never
// extended the holder's deadline. Beat keys lie outside lock/, so a renewal wakes
// neither waiters nor Watch.

// beatWidth is the width of a beat's value: milliseconds, zero-padded, so that
// etcd's byte comparison of two values compares the TTLs.
const beatWidth = 12

// expiryMargin and driftDivisor make up what a waiter waits beyond a silent
// holder's TTL: expiryMargin, and a 1/driftDivisor share of the TTL for clocks
// whose rates differ (quartz and NTP keep that within 0.05%).
const (
	expiryMargin = 50 * time.Millisecond
	driftDivisor = 100
)

// silence is how long a waiter waits, from when it first saw a beat's revision,
// before it may end the grant whose TTL the beat holds.
func silence(ttl time.Duration) time.Duration { return ttl + ttl/driftDivisor + expiryMargin }

// beat returns the beat key of key, a lock key or holder key of this prefix.
func (k keys) beat(key string) string {
	return k.prefix + "beat/" + strings.TrimPrefix(key, k.prefix+"lock/")
}

// beatOf returns the lease key whose beat key is beat.
func (k keys) beatOf(beat string) string {
	return k.prefix + "lock/" + strings.TrimPrefix(beat, k.prefix+"beat/")
}

// beats returns the range of name's beat keys.
func (k keys) beats(name string) (string, string) {
	b := k.prefix + "beat/" + name
	return b, b + "\x01"
}

// beatValue is a beat's value for ttl, rounded up to whole milliseconds.
func beatValue(ttl time.Duration) string {
	return fmt.Sprintf("%0*d", beatWidth, (ttl+time.Millisecond-1)/time.Millisecond)
}

// parseBeat decodes a beat's value; false if this package did not write it.
func parseBeat(v []byte) (time.Duration, bool) {
	if len(v) != beatWidth {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// putBeat is the grant's write of the beat of key, under el.
func (k keys) putBeat(key string, ttl time.Duration, el clientv3.LeaseID) clientv3.Op {
	return clientv3.OpPut(k.beat(key), beatValue(ttl), clientv3.WithLease(el))
}

// touchBeat is a renewal's write of the beat of key, if there is one, kept on its
// etcd lease: a new revision. Its value becomes the larger of ttl and the one it
// held, so a TTL never shrinks for the waiters: a renewal to a shorter TTL may be
// applied while its reply is lost, and then the holder keeps the longer deadline.
func (k keys) touchBeat(key string, ttl time.Duration) clientv3.Op {
	b, v := k.beat(key), beatValue(ttl)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(b), ">", 0)},
		[]clientv3.Op{clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(b), "<", v)},
			[]clientv3.Op{clientv3.OpPut(b, v, clientv3.WithIgnoreLease())},
			[]clientv3.Op{clientv3.OpPut(b, "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())})},
		nil)
}

// moveBeat moves the beat of key, if there is one, to the etcd lease el, as Renew
// moves key.
func (k keys) moveBeat(key string, el clientv3.LeaseID) clientv3.Op {
	b := k.beat(key)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(b), ">", 0)},
		[]clientv3.Op{clientv3.OpPut(b, "", clientv3.WithIgnoreValue(), clientv3.WithLease(el))},
		nil)
}

// renewBeat writes the beat of key for a renewal by a Locker without FastExpiry,
// whose renewal transaction found that key has one (a grant of a Locker with it):
// without the write, that Locker's waiters would end a grant that is renewed.
func (l *Locker) renewBeat(ctx context.Context, key string, held []clientv3.Cmp, ttl time.Duration) error {
	_, err := l.cli.Txn(ctx).If(held...).Then(l.keys.touchBeat(key, ttl)).Commit()
	return err
}

// beatLog is what one waiting acquire saw of its name's beats: for each beat key,
// the newest mod revision and when the call first saw it, by its clock (the
// instant a read or watch event that carried it arrived: after etcd applied it).
// Its tries read the beats, its watch reports each new one.
type beatLog struct {
	mu   sync.Mutex
	seen map[string]beatSeen
}

type beatSeen struct {
	rev int64
	at  time.Time
}

// observe notes that beat key had mod revision rev at at: a newer revision
// replaces what was seen, the same one keeps the earliest instant.
func (b *beatLog) observe(key string, rev int64, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]beatSeen{}
	}
	s, ok := b.seen[key]
	if !ok || rev > s.rev || rev == s.rev && at.Before(s.at) {
		b.seen[key] = beatSeen{rev: rev, at: at}
	}
}

// judge takes a read's beats of a name, made at now (when its reply came), and
// returns those silent for their whole silence, and how long until the next one
// may be (0: none). Beats not in kvs are forgotten: their keys are gone.
func (b *beatLog) judge(kvs []*mvccpb.KeyValue, now time.Time) (silent []*mvccpb.KeyValue, next time.Duration) {
	for _, kv := range kvs {
		b.observe(string(kv.Key), kv.ModRevision, now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	keep := make(map[string]beatSeen, len(kvs))
	for _, kv := range kvs {
		s := b.seen[string(kv.Key)]
		keep[string(kv.Key)] = s
		ttl, ok := parseBeat(kv.Value)
		if !ok || s.rev != kv.ModRevision {
			continue // not this package's; or a newer revision came meanwhile
		}
		left := s.at.Add(silence(ttl)).Sub(now)
		if left <= 0 {
			silent = append(silent, kv)
		} else if next == 0 || left < next {
			next = left
		}
	}
	b.seen = keep
	return silent, next
}

// expire ends the grants of name whose beats are silent: for each, one transaction
// that deletes the lease's key (and a lock's owner key) and the beat if the beat's
// mod revision is still the one judged, so a renewal applied meanwhile wins. The
// emptied etcd leases are left to expire. It reports whether it ended one.
func (l *Locker) expire(ctx context.Context, name string, silent []*mvccpb.KeyValue) (bool, error) {
	ended := false
	for _, kv := range silent {
		key := l.keys.beatOf(string(kv.Key))
		del := []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(string(kv.Key))}
		if key == l.keys.lock(name) {
			del = append(del, clientv3.OpDelete(l.keys.owner(name)))
		}
		resp, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(del...).
			Commit()
		if err != nil {
			return ended, fmt.Errorf("expire: %w", storeErr(err))
		}
		ended = ended || resp.Succeeded
	}
	return ended, nil
}
