package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

var (
	//go:embed scripts/holders.lua
	holdersSrc string
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/lock.lua
	lockSrc string
	//go:embed scripts/lease.lua
	leaseSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/lease_multi.lua
	leaseMultiSrc string
	//go:embed scripts/heal.lua
	healSrc string
	//go:embed scripts/inspect.lua
	inspectSrc string
	//go:embed scripts/revoke.lua
	revokeSrc string

	// The scripts that read semaphore and shared leases run after holders.lua;
	// lease.lua decides a lock's renew or release before it (its functions are
	// closures made on every run).
	acquireScript = goredis.NewScript(holdersSrc + acquireSrc)
	leaseScript   = goredis.NewScript(leaseSrc + holdersSrc + leaseMultiSrc)
	healScript    = goredis.NewScript(healSrc)
	inspectScript = goredis.NewScript(holdersSrc + inspectSrc)
	revokeScript  = goredis.NewScript(holdersSrc + revokeSrc)
)

// maxTokenArg is fence.MaxToken as the acquire script's argument, boxed once.
var maxTokenArg any = strconv.FormatUint(uint64(fence.MaxToken), 10)

// The hot paths' scripts, lock.lua and release.lua, have their publish command
// written in (one argument less to send and for Redis to set up, per call): each
// in two variants, [0] with SPUBLISH, [1] with PUBLISH (Options.ClassicPubSub).
var (
	lockScripts    = pubVariants(lockSrc)
	releaseScripts = pubVariants(releaseSrc)
)

// pubVariants returns src as scripts, as the hot paths' scripts are kept.
func pubVariants(src string) [2]*goredis.Script {
	return [2]*goredis.Script{
		goredis.NewScript(src),
		goredis.NewScript(strings.ReplaceAll(src, "'SPUBLISH'", "'PUBLISH'")),
	}
}

var (
	_ fence.Locker        = (*Locker)(nil)
	_ fence.FeatureLocker = (*Locker)(nil)
	_ fence.Healer        = (*Locker)(nil)
	_ fence.Revoker       = (*Locker)(nil)
	_ fence.Inspector     = (*Locker)(nil)
	_ fence.Watcher       = (*Locker)(nil)
	_ Client              = goredis.UniversalClient(nil)
)

// Client is the part of go-redis a Locker uses. *goredis.Client (also as returned by
// goredis.NewFailoverClient for Sentinel), *goredis.ClusterClient and any
// goredis.UniversalClient satisfy it.
type Client interface {
	goredis.Scripter
	// Pipeline sends the WAIT / WAITAOF of Options on the connection that ran the
	// acquire script.
	Pipeline() goredis.Pipeliner
	// SSubscribe and Subscribe wake waiters and watchers (sharded pub/sub, or
	// classic pub/sub with Options.ClassicPubSub).
	SSubscribe(ctx context.Context, channels ...string) *goredis.PubSub
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
	// Scan lists counters for Inspector.List.
	Scan(ctx context.Context, cursor uint64, match string, count int64) *goredis.ScanCmd
}

// Options configure a Locker. The zero value is usable: no durability wait, sharded
// pub/sub, a one-second fallback poll.
type Options struct {
	// Prefix starts every key fence writes. Default "fence:". It must not contain
	// '{' or '}' (the hash tag follows it).
	Prefix string

	// PollInterval bounds how long a waiter sleeps without a notification before it
	// tries again: pub/sub messages can be lost (reconnects, Cluster slot moves), so
	// a waiter also retries every PollInterval and when the holder's lease expires.
	// Default 1s.
	PollInterval time.Duration

	// ClassicPubSub makes the scripts PUBLISH and waiters and watchers SUBSCRIBE
	// instead of the sharded SPUBLISH/SSUBSCRIBE (Redis 7+). Set it for Redis 6 and
	// older.
	ClassicPubSub bool

	// WaitReplicas, when above zero, makes Acquire send WAIT WaitReplicas
	// WaitTimeout after the acquire script, on the same connection, and hand out
	// the lease only if at least that many replicas acknowledged the grant and its
	// counter increment. Otherwise Acquire releases the lock and returns an error
	// matching ErrNotReplicated (fail closed). See the package documentation for
	// what this does and does not guarantee.
	WaitReplicas int
	// WaitAOFLocal (0 or 1) and WaitAOFReplicas, when either is above zero, make
	// Acquire send WAITAOF WaitAOFLocal WaitAOFReplicas WaitTimeout (Redis 7.2+)
	// after the script, and fail closed like WaitReplicas when fewer fsyncs were
	// acknowledged. On older servers every Acquire fails with a clear error.
	WaitAOFLocal    int
	WaitAOFReplicas int
	// WaitTimeout bounds WAIT and WAITAOF. Default 1s. Keep it below the client's
	// ReadTimeout (go-redis default 3s), which bounds the pipelined reply.
	WaitTimeout time.Duration

	// Clock measures the local deadlines of leases and the wait of Acquire. Default
	// driver.SystemClock. Expiry at the server is by the Redis server's clock.
	Clock driver.Clock
}

// Locker is a fence.Locker on Redis. See the package documentation for waiting,
// durability and healing, and docs/redis.md for the key layout and scripts. A
// Locker is safe for concurrent use; it
// does not own the client, which the caller closes after Close.
type Locker struct {
	client  Client
	opts    Options
	prefix  string
	publish string // SPUBLISH or PUBLISH, run by the scripts that change a lock
	pubArg  any    // publish, boxed once
	clock   driver.Clock
	engine  driver.Engine
	acquire *goredis.Script // acquireScript; a benchmark swaps in a variant
	lock    *goredis.Script // lock.lua's variant, tried first for a plain lock; nil: acquire only
	unlock  *goredis.Script // release.lua's variant, tried first for a release not in multi
	multi   multiLeases     // semaphore and shared leases granted, released by lease.lua at once
	relay   relay           // Watch's shared subscriptions
	batch   batcher         // acquires and releases of concurrent calls, pipelined together

	closeMu sync.Mutex // orders bg.Add before Close's bg.Wait
	closed  chan struct{}
	bg      sync.WaitGroup // best-effort releases after ambiguous acquires
}

// NewLocker returns a Locker on client with opts (nil means defaults). It returns an
// error matching fence.ErrInvalid if client is nil or an option is out of range. It
// does not contact the server.
func NewLocker(client Client, opts *Options) (*Locker, error) {
	if client == nil {
		return nil, fmt.Errorf("redis: new locker: %w", &fence.InvalidError{Field: "client", Reason: "is nil"})
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "fence:"
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("redis: new locker: %w", &fence.InvalidError{Field: "prefix", Value: o.Prefix, Reason: "must not contain '{' or '}'"})
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = time.Second
	}
	switch {
	case o.PollInterval < time.Millisecond:
		return nil, fmt.Errorf("redis: new locker: %w", &fence.InvalidError{Field: "poll interval", Value: o.PollInterval.String(), Reason: "must be at least 1ms"})
	case o.WaitReplicas < 0 || o.WaitAOFReplicas < 0:
		return nil, fmt.Errorf("redis: new locker: %w", &fence.InvalidError{Field: "wait replicas", Value: strconv.Itoa(min(o.WaitReplicas, o.WaitAOFReplicas)), Reason: "must not be negative"})
	case o.WaitAOFLocal < 0 || o.WaitAOFLocal > 1:
		return nil, fmt.Errorf("redis: new locker: %w", &fence.InvalidError{Field: "wait aof local", Value: strconv.Itoa(o.WaitAOFLocal), Reason: "must be 0 or 1"})
	case o.WaitTimeout < time.Millisecond:
		return nil, fmt.Errorf("redis: new locker: %w", &fence.InvalidError{Field: "wait timeout", Value: o.WaitTimeout.String(), Reason: "must be at least 1ms"})
	}
	clock := o.Clock
	if clock == nil {
		clock = driver.SystemClock
	}
	publish, variant := "SPUBLISH", 0
	if o.ClassicPubSub {
		publish, variant = "PUBLISH", 1
	}
	l := &Locker{
		client: client, opts: o, prefix: o.Prefix, publish: publish, pubArg: publish, clock: clock,
		acquire: acquireScript, lock: lockScripts[variant], unlock: releaseScripts[variant], closed: make(chan struct{}),
	}
	l.engine = driver.Engine{Backend: "redis", Locker: l, Clock: clock, Poll: o.PollInterval, Closed: l.closed, Features: features}
	l.relay.l = l
	if _, cluster := client.(masterForKeyer); !cluster {
		l.batch.c = client
	}
	return l, nil
}

// features are the kinds of grant beyond locks that a Locker makes.
var features = fence.Features{Semaphores: true, Shared: true}

// Features returns the kinds of grant beyond exclusive locks that Acquire makes:
// semaphores (fence.WithLimit) and shared locks (fence.WithShared), both.
func (l *Locker) Features() fence.Features { return features }

// Close makes further calls fail with fence.ErrClosed, ends waiting Acquires and
// Watches with it, closes the pub/sub connections of Watch, and waits for
// background clean-up (releases of grants whose reply was lost). It does not close
// the client. It always returns nil.
func (l *Locker) Close() error {
	l.closeMu.Lock()
	if !l.isClosed() {
		close(l.closed)
	}
	l.closeMu.Unlock()
	l.relay.close()
	l.bg.Wait()
	return nil
}

func (l *Locker) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// Acquire grants a lease on name for ttl: one script sets the lock (SET PX),
// increments the name's fencing counter and publishes the grant for watchers, in
// one round trip (a lock acquire that finds semaphore or shared leases on the
// name, or foreign data, takes a second, which decides by the rules below); the owner of fence.WithOwner is stored with the lease, so
// Inspect and List report it. With fence.WithLimit (a semaphore: the lowest free
// slot, Lease.Slot) or fence.WithShared the same script grants the lease by the
// rules of driver.Decide, in the same round trip. With fence.WithWait it waits
// for a release (woken by pub/sub), the holder's expiry, or the fallback poll
// (Options.PollInterval).
//
// Its errors are worded as driver.Engine words them. They match fence.ErrNotAcquired
// (and a *fence.HeldError) if the lock stayed held, also ctx.Err() when ctx ended the
// wait; fence.ErrInvalid for a bad name, TTL or limit, and with a *fence.LimitError
// when the name's live leases have another limit; fence.ErrTokenExhausted when the
// counter is at fence.MaxToken; ErrWrongType when a key holds foreign data;
// ErrNotReplicated when the durability wait failed; fence.ErrUnavailable when Redis
// cannot be reached; fence.ErrClosed after Close.
func (l *Locker) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (*fence.Lease, error) {
	a := &acquirer{l: l, k: l.keysFor(name)}
	defer a.close()
	return l.engine.Acquire(ctx, name, ttl, opts, a.try)
}

// acquirer is the state of one Acquire across its tries: the name's keys and, while
// the call waits, its subscription to the name's wake channel.
type acquirer struct {
	l     *Locker
	k     keys
	sub   *wakeSub      // nil before the second try, and after a failed or dropped subscription
	resub time.Duration // after failed subscriptions: how soon to subscribe again
	quick int           // tries in a row that found the holder at its last millisecond
}

// try runs the acquire script once. A waiting call that finds the lock held
// subscribes to the wake channel and tries again at once (Result.Again); from then on
// every try looks at the lock after its subscription is confirmed, so a release
// after the look wakes it (Result.Wake).
func (a *acquirer) try(ctx context.Context, r *driver.Request) (driver.Result, error) {
	l := a.l
	var wake <-chan struct{}
	if a.sub != nil {
		if wake = a.sub.next(); wake == nil {
			// The server dropped the subscription (a Cluster slot moved):
			// subscribe again, at the slot's new owner.
			a.sub.close()
			a.sub = nil
		}
	}
	if r.Waiting && r.Try > 1 && a.sub == nil {
		// After a failed subscription (a Cluster slot that just moved answers MOVED
		// until the client refreshes its slot map), subscribe again soon, backing off
		// up to PollInterval, rather than rely on polling alone.
		switch a.sub = l.subscribe(ctx, a.k.wake, r.WaitLeft); {
		case a.sub != nil:
			a.resub = 0
			wake = a.sub.next()
		case a.resub == 0:
			a.resub = 10 * time.Millisecond
		default:
			a.resub = min(2*a.resub, l.opts.PollInterval)
		}
	}
	start := l.clock.Now()
	g, err := l.grant(ctx, a.k, r)
	if err != nil || g.token != 0 {
		return driver.Result{Token: g.token, Slot: g.slot, Start: start}, err
	}
	pttl := g.pttl
	var res driver.Result
	if pttl > 0 {
		res.ExpiresIn = time.Duration(pttl) * time.Millisecond
	}
	if r.Try == 1 {
		res.Again = r.Waiting // subscribe, then look again
		return res, nil
	}
	res.Retry, a.quick = retryAfter(pttl, a.quick, l.opts.PollInterval)
	if g.marked {
		// Try again before the waiter record lapses, so that a writer whose TTL
		// is shorter than the readers' time left stays preferred while it waits.
		res.Retry = min(res.Retry, max(driver.WaiterFor(r)/2, time.Millisecond))
	}
	if a.sub == nil {
		res.Retry = min(res.Retry, a.resub)
	}
	res.Wake = wake
	return res, nil
}

func (a *acquirer) close() {
	if a.sub != nil {
		a.sub.close()
	}
}

// grant is what one run of the acquire script found: a grant (token, and slot
// for a semaphore), or the name held, with the time left (ms) until the lease
// whose end may free it for this acquire is gone, less a millisecond, as PTTL
// reports it (-1: no expiry).
type grant struct {
	token  fence.Token
	slot   int
	pttl   int64
	marked bool // the acquire recorded itself as an exclusive waiter
}

// Boxed once: the acquire script's arguments of a lock.
var (
	zeroArg any = "0"
	oneArg  any = "1"
)

// grant runs the acquire script once for r's lease id, owner and kind (lock,
// semaphore or shared): for a plain lock the lean lock script first, and the full
// acquire script only if that could not decide. It returns what the script found,
// or an error: a *fence.LimitError if the live leases have another limit. A grant
// whose reply was lost or unusable, or that was not acknowledged as Options ask,
// is released.
func (l *Locker) grant(ctx context.Context, k keys, r *driver.Request) (grant, error) {
	o := &r.Options
	if l.lock != nil && o.Limit == 0 && !o.Shared {
		// The lock value up to its token, built here: one allocation in Go is
		// cheaper than concatenations in Lua.
		holder := r.ID + " "
		if o.Owner != "" {
			holder = r.ID + " " + o.Owner + " "
		}
		args := []any{holder, r.TTL.Milliseconds()}
		if g, decided, err := l.runAcquire(ctx, k, r, l.lock, []string{k.lock, k.token}, args); decided {
			return g, err
		}
	}
	limit, shared, waiter := zeroArg, zeroArg, zeroArg
	switch {
	case o.Limit > 0:
		limit = strconv.Itoa(o.Limit)
	case o.Shared:
		shared = oneArg
	case r.Waiting:
		waiter = driver.WaiterFor(r).Milliseconds()
	}
	keys := []string{k.lock, k.token, k.holders, k.expiry, k.slots}
	args := []any{r.ID, r.TTL.Milliseconds(), maxTokenArg, o.Owner, k.wake, l.pubArg, limit, shared, waiter}
	g, _, err := l.runAcquire(ctx, k, r, l.acquire, keys, args)
	if err == nil && g.token != 0 && (o.Limit > 0 || o.Shared) {
		now := l.clock.Now()
		l.multi.add(r.ID, now.Add(r.TTL), now)
	}
	return g, err
}

// runAcquire runs an acquire script (lock.lua or acquire.lua) once and reads its
// reply, as grant describes. decided is false only for lock.lua's {3}: the full
// acquire script must decide; nothing was granted.
func (l *Locker) runAcquire(ctx context.Context, k keys, r *driver.Request, script *goredis.Script, keys []string, args []any) (g grant, decided bool, err error) {
	res, problem, err := l.runWrite(ctx, script, keys, args)
	if err != nil {
		if ambiguous(err) {
			l.releaseLater(k, r.ID)
		}
		return grant{}, true, translate(err)
	}
	a, n, ok := ints3(res)
	if t, token := res.(int64); token && script == l.lock {
		a, n, ok = [3]int64{1, t}, 2, true // lock.lua's grant: the token alone
	}
	if ok && n == 1 && a[0] == 3 && script == l.lock {
		return grant{}, false, nil
	}
	if !ok || n < 2 {
		l.releaseLater(k, r.ID)
		return grant{}, true, fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
	}
	g = grant{token: fence.Token(a[1])}
	if n == 3 {
		g.slot = int(a[2])
	}
	switch t := a[1]; {
	case a[0] == 0:
		return grant{pttl: t, marked: n == 3}, true, nil
	case a[0] == 2:
		return grant{}, true, &fence.LimitError{Name: r.Name, Limit: max(r.Options.Limit, 1), Held: int(t)}
	case a[0] != 1 || g.slot < 0 || g.slot >= max(r.Options.Limit, 1):
		l.releaseLater(k, r.ID)
		return grant{}, true, fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
	case problem != "":
		if err := l.release(ctx, k, r.ID); err != nil && !errors.Is(err, fence.ErrNotHeld) {
			l.releaseLater(k, r.ID)
		}
		return grant{}, true, fmt.Errorf("token %d: %s; lock released: %w", t, problem, ErrNotReplicated)
	case fence.ValidateToken(fence.Token(t)) != nil:
		l.releaseLater(k, r.ID)
		return grant{}, true, fmt.Errorf("%w: script issued token %d", fence.ErrUnavailable, t)
	}
	return g, true, nil
}

// ints3 decodes a script reply that is a list of one to three integers, without
// allocating: a holds them, n how many. ok is false for any other reply.
func ints3(res any) (a [3]int64, n int, ok bool) {
	list, ok := res.([]any)
	if !ok || len(list) < 1 || len(list) > len(a) {
		return a, 0, false
	}
	for i, v := range list {
		if a[i], ok = v.(int64); !ok {
			return a, 0, false
		}
	}
	return a, len(list), true
}

// releaseLater releases lease id in the background, for grants whose reply was lost
// or unusable: the lease id is fresh, so this can only end that grant. Failures are
// ignored; the lock then expires with its TTL.
func (l *Locker) releaseLater(k keys, id string) {
	release := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = l.release(ctx, k, id)
	}
	l.closeMu.Lock()
	if l.isClosed() {
		// Close may be waiting already: release in this goroutine instead.
		l.closeMu.Unlock()
		release()
		return
	}
	l.bg.Add(1)
	l.closeMu.Unlock()
	go func() {
		defer l.bg.Done()
		release()
	}()
}

// quickRetries is how many tries in a row a waiter makes a millisecond apart when
// it finds the holder's lease in its last millisecond, before it backs off.
const quickRetries = 3

// retryAfter returns how long a waiter sleeps, unless woken by a release message,
// after a try found the lock held with pttl milliseconds left (the acquire script's
// PTTL of the lock key; -1 if it has no expiry), and the new count of quick retries
// in a row (quick is the count so far).
//
// Redis keeps a key while its clock, in whole milliseconds, is at or before the
// key's expiry, and PTTL is the difference, so the key is gone pttl+1 ms after the
// script ran; the waiter tries again then. A PTTL of 0 or 1 is common, not a corner
// case: a waiter woken at the PTTL it was told arrives in the key's last
// millisecond, or Redis's expiry lags (it deletes lazily, on access, or in its
// active-expire cycle). Each such try is retried after a millisecond or two, never
// after a whole PollInterval; after quickRetries of them in a row (a Redis clock
// that does not move, a holder renewing to 1ms leases) the sleep doubles up to
// PollInterval, so a waiter cannot spin.
func retryAfter(pttl int64, quick int, poll time.Duration) (time.Duration, int) {
	if pttl < 0 {
		return poll, 0 // no expiry: only a release or the poll ends the wait
	}
	d := time.Duration(pttl+1) * time.Millisecond
	if pttl > 1 {
		return min(d, poll), 0
	}
	quick++
	if quick > quickRetries {
		d = max(d, time.Millisecond<<min(quick-quickRetries, 20))
	}
	return min(d, poll), quick
}

// wakeSub is a confirmed subscription to a wake channel, turned into the
// Result.Wake of each try: a goroutine forwards the messages.
type wakeSub struct {
	ps      *goredis.PubSub
	mu      sync.Mutex
	c       chan struct{} // closed by the next message
	dropped bool          // the subscription ended: the server dropped it, or close
}

// subscribe subscribes to a wake channel and waits, at most waitLeft, for the
// server's confirmation. It returns nil if that failed: the waiter then relies on
// polling and expiry.
func (l *Locker) subscribe(ctx context.Context, channel string, waitLeft time.Duration) *wakeSub {
	ps := l.pubSub(ctx, channel)
	if _, err := ps.ReceiveTimeout(ctx, l.confirmWithin(ctx, waitLeft)); err != nil {
		_ = ps.Close()
		return nil
	}
	w := &wakeSub{ps: ps, c: make(chan struct{})}
	go w.forward(ps.ChannelWithSubscriptions(goredis.WithChannelSize(4)))
	return w
}

// pubSub returns a pub/sub connection subscribed to channels (SSUBSCRIBE, or
// SUBSCRIBE with Options.ClassicPubSub); with none, it does no I/O yet.
func (l *Locker) pubSub(ctx context.Context, channels ...string) *goredis.PubSub {
	if l.opts.ClassicPubSub {
		return l.client.Subscribe(ctx, channels...)
	}
	return l.client.SSubscribe(ctx, channels...)
}

// confirmWithin bounds the wait for a subscription's confirmation: go-redis reads
// pub/sub replies without a deadline, and a waiter or watcher must not hang on a
// server that accepted the connection but does not answer. It is at most
// PollInterval and 5s, waitLeft (unless fence.WaitForever) and ctx's time left,
// and at least a millisecond.
func (l *Locker) confirmWithin(ctx context.Context, waitLeft time.Duration) time.Duration {
	timeout := min(l.opts.PollInterval, 5*time.Second)
	if waitLeft != fence.WaitForever {
		timeout = min(timeout, waitLeft)
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	return max(timeout, time.Millisecond)
}

// forward signals every message on ch that may say the lock is free, until the
// subscription ends: ch closes, or the server unsubscribes (a Cluster slot moved).
func (w *wakeSub) forward(ch <-chan any) {
	for m := range ch {
		switch m := m.(type) {
		case *goredis.Subscription:
			if dropped(m) {
				w.signal(true)
				return
			}
		case *goredis.Message:
			if !freeing(m.Payload) {
				continue
			}
		}
		w.signal(false)
	}
	w.signal(true)
}

// freeing reports whether a message on a wake channel may mean the lock is free:
// every payload but those of a grant or a heal, which watchers want and waiters
// do not (a payload a later version adds wakes waiters, which is harmless).
func freeing(payload string) bool { return payload != "granted" && payload != "healed" }

// dropped reports whether a subscription message says the server ended a
// subscription: fence never unsubscribes a connection it keeps, so that is a
// Cluster slot that moved.
func dropped(s *goredis.Subscription) bool { return strings.HasSuffix(s.Kind, "unsubscribe") }

func (w *wakeSub) signal(drop bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropped = w.dropped || drop
	select {
	case <-w.c:
	default:
		close(w.c)
	}
}

// next returns a channel that closes at the next message, or nil if the
// subscription ended.
func (w *wakeSub) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropped {
		return nil
	}
	select {
	case <-w.c:
		w.c = make(chan struct{}) // that message came before this try looks
	default:
	}
	return w.c
}

func (w *wakeSub) close() { _ = w.ps.Close() }

// Renew extends the lease name/leaseID (a lock, a permit or a shared lease) to
// ttl from now, by the Redis server's clock, if and only if it is still held under
// that lease id and unexpired (checked inside a script).
//
// It returns an error matching fence.ErrNotHeld if the lease expired, was released
// or never existed; fence.ErrInvalid for bad arguments; fence.ErrUnavailable when
// Redis cannot be reached; fence.ErrClosed after Close.
func (l *Locker) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) error {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return fmt.Errorf("redis: renew: %w", err)
	}
	if err := fence.ValidateTTL(ttl); err != nil {
		return fmt.Errorf("redis: renew %q: %w", name, err)
	}
	if l.isClosed() {
		return fmt.Errorf("redis: renew %q: %w", name, fence.ErrClosed)
	}
	k := l.keysFor(name)
	n, err := leaseScript.Run(ctx, l.client, k.leaseKeys(), leaseID, "renew", ttl.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("redis: renew %q: %w", name, translate(err))
	}
	if n != 1 {
		return fmt.Errorf("redis: renew %q: %w", name, fence.ErrNotHeld)
	}
	l.multi.extend(leaseID, l.clock.Now().Add(ttl))
	return nil
}

// Release ends the lease name/leaseID (a lock, a permit or a shared lease) if it
// is still held under that lease id (checked inside a script), and publishes on
// the name's wake channel so waiters try at once.
//
// It returns an error matching fence.ErrNotHeld if that lease is no longer held (a
// retried release never touches a newer holder); fence.ErrInvalid for bad
// arguments; fence.ErrUnavailable when Redis cannot be reached; fence.ErrClosed after
// Close.
func (l *Locker) Release(ctx context.Context, name, leaseID string) error {
	if err := driver.ValidateLease(name, leaseID); err != nil {
		return fmt.Errorf("redis: release: %w", err)
	}
	if l.isClosed() {
		return fmt.Errorf("redis: release %q: %w", name, fence.ErrClosed)
	}
	if err := l.release(ctx, l.keysFor(name), leaseID); err != nil {
		return fmt.Errorf("redis: release %q: %w", name, err)
	}
	return nil
}

// release ends lease leaseID: by lease.lua if it is a semaphore or shared lease
// this Locker granted (see multiLeases), else by release.lua, and then by lease.lua
// (a second round trip) if the name holds semaphore or shared leases.
func (l *Locker) release(ctx context.Context, k keys, leaseID string) error {
	var (
		res any
		err error
	)
	multi := l.multi.take(leaseID)
	if !multi {
		res, err = l.batch.run(ctx, l.client, l.unlock, []string{k.lock}, []any{leaseID + " "})
		if err != nil {
			return translate(err)
		}
		n, ok := res.(int64)
		multi = ok && n == 3
	}
	if multi {
		res, err = l.batch.run(ctx, l.client, leaseScript, k.leaseKeys(), []any{leaseID, releaseArg, k.wake, l.pubArg})
		if err != nil {
			return translate(err)
		}
	}
	switch n, ok := res.(int64); {
	case !ok:
		return fmt.Errorf("%w: unexpected script reply %v", fence.ErrUnavailable, res)
	case n != 1:
		return fence.ErrNotHeld
	}
	return nil
}

// releaseArg is the lease script's "release", boxed once.
var releaseArg any = "release"

// runWrite runs an acquire script: batched with other calls' (see batcher)
// unless Options ask for WAIT or WAITAOF, which must follow it on its connection
// (see runWrite).
func (l *Locker) runWrite(ctx context.Context, script *goredis.Script, keys []string, args []any) (any, string, error) {
	if o := &l.opts; o.WaitReplicas > 0 || o.WaitAOFLocal > 0 || o.WaitAOFReplicas > 0 {
		return runWrite(ctx, l.client, o, script, keys, args, true)
	}
	res, err := l.batch.run(ctx, l.client, script, keys, args)
	return res, "", err
}

// Revoke ends the current lease on name now (every live permit or shared lease,
// for a semaphore or a shared lock), whoever holds it, and publishes on the
// name's wake channel so waiters try at once (see fence.Revoker). One script looks
// at the lock key and deletes it, so a lease granted after the look is never ended.
// The revoked holder's Renew and Release then return fence.ErrNotHeld; its token
// stays used, so the next grant's is higher. With Options.WaitReplicas or
// WaitAOF*, WAIT / WAITAOF follow the script as they follow an acquire's.
//
// It returns an error matching fence.ErrNotHeld if no unexpired lease is held;
// fence.ErrInvalid for a bad name; ErrWrongType if the lock key holds foreign data
// (left alone); fence.ErrUnavailable when Redis cannot be reached, and also when
// the lease was ended on the primary but fewer replicas (or fsyncs) than Options ask
// acknowledged that within WaitTimeout (a failover may then bring the lease back;
// Revoke again to be sure only if you accept ending a newer holder's lease too);
// fence.ErrClosed after Close.
func (l *Locker) Revoke(ctx context.Context, name string) error {
	if err := fence.ValidateName(name); err != nil {
		return fmt.Errorf("redis: revoke %q: %w", name, err)
	}
	if l.isClosed() {
		return fmt.Errorf("redis: revoke %q: %w", name, fence.ErrClosed)
	}
	k := l.keysFor(name)
	res, problem, err := runWrite(ctx, l.client, &l.opts, revokeScript, k.leaseKeys(), []any{k.wake, l.pubArg}, true)
	if err != nil {
		return fmt.Errorf("redis: revoke %q: %w", name, translate(err))
	}
	switch n, ok := res.(int64); {
	case !ok:
		return fmt.Errorf("redis: revoke %q: %w: unexpected script reply %v", name, fence.ErrUnavailable, res)
	case n != 1:
		return fmt.Errorf("redis: revoke %q: %w", name, fence.ErrNotHeld)
	case problem != "":
		return fmt.Errorf("redis: revoke %q: %w: lease ended on the primary, but %s; a failover may bring it back", name, fence.ErrUnavailable, problem)
	}
	return nil
}

// Heal raises name's fencing counter to at least seen, never lowering it, so the
// next grant's token is above seen (P4). Call it with the Highest of a guard's
// *fence.StaleTokenError after a failover lost increments; fence.Heal(ctx, locker,
// name, err) does that for any error. Each name has its own counter key, so no
// other name's tokens move. Healing does not touch the current lease; if it raised
// the counter, it publishes on the name's wake channel for watchers.
//
// seen may be at most fence.MaxHealAhead above the name's last token, which here
// is its counter (the last token issued for name, or healed to, as the primary
// has it now; 0 for a name never used); a larger seen is refused with a
// *fence.HealBoundError (matching fence.ErrInvalid) and nothing changes. The
// script checks the bound and raises the counter in one step. A failover loses a
// few increments, never 2^32; after a larger regression, heal in steps.
//
// It returns fence.ErrInvalid for a bad name or a seen outside [1, fence.MaxToken],
// ErrWrongType if the counter key holds foreign data, fence.ErrUnavailable when Redis
// cannot be reached, and fence.ErrClosed after Close.
func (l *Locker) Heal(ctx context.Context, name string, seen fence.Token) error {
	if err := fence.ValidateName(name); err != nil {
		return fmt.Errorf("redis: heal %q: %w", name, err)
	}
	if err := fence.ValidateToken(seen); err != nil {
		return fmt.Errorf("redis: heal %q: %w", name, err)
	}
	if l.isClosed() {
		return fmt.Errorf("redis: heal %q: %w", name, fence.ErrClosed)
	}
	k := l.keysFor(name)
	err := healScript.Run(ctx, l.client, []string{k.token}, uint64(seen), k.wake, l.publish, uint64(fence.MaxHealAhead)).Err()
	if last, ok := healBound(err); ok {
		err = &fence.HealBoundError{Name: name, Seen: seen, Last: last}
	} else if err != nil {
		err = translate(err)
	}
	if err != nil {
		return fmt.Errorf("redis: heal %q: %w", name, err)
	}
	return nil
}

// healBound returns the counter in heal.lua's refusal of a seen beyond the bound,
// and whether err is that refusal.
func healBound(err error) (fence.Token, bool) {
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return 0, false
	}
	const tag = "FENCE_HEALBOUND "
	msg := rerr.Error()
	i := strings.Index(msg, tag)
	if i < 0 {
		return 0, false
	}
	digits, _, _ := strings.Cut(msg[i+len(tag):], " ")
	n, perr := strconv.ParseUint(digits, 10, 64)
	return fence.Token(n), perr == nil
}

// Inspect returns the state of lock name: whether it is held, the holder's token,
// owner (fence.WithOwner; "" for none, and for a lease written by a version without
// owners) and time left, and the highest token issued. For a semaphore or a shared
// lock it also reports Limit, Shared and every live lease in Holders, as
// driver.Info does (the leases' time left is as of the script, by the server's
// clock); reading them costs O(n) in the n live leases. The lease id is never
// reported. A lock never acquired is reported with Held false and LastToken 0. It
// returns fence.ErrInvalid for a bad name, ErrWrongType if the counter holds foreign
// data, fence.ErrUnavailable when Redis cannot be reached, and fence.ErrClosed after
// Close.
func (l *Locker) Inspect(ctx context.Context, name string) (fence.LockInfo, error) {
	if err := fence.ValidateName(name); err != nil {
		return fence.LockInfo{}, fmt.Errorf("redis: inspect %q: %w", name, err)
	}
	if l.isClosed() {
		return fence.LockInfo{}, fmt.Errorf("redis: inspect %q: %w", name, fence.ErrClosed)
	}
	k := l.keysFor(name)
	res, err := inspectScript.Run(ctx, l.client, []string{k.lock, k.token, k.holders, k.expiry}).Slice()
	if err != nil {
		return fence.LockInfo{}, fmt.Errorf("redis: inspect %q: %w", name, translate(err))
	}
	r, ok := inspectReply(res)
	if !ok {
		return fence.LockInfo{}, fmt.Errorf("redis: inspect %q: %w: unexpected script reply %v", name, fence.ErrUnavailable, res)
	}
	if r.counter < 0 {
		return fence.LockInfo{}, fmt.Errorf("redis: inspect %q: counter key %s holds a value that is not a token: %w", name, k.token, ErrWrongType)
	}
	if r.holders != nil {
		// Semaphore or shared leases: driver.Info derives the holder fields.
		return driver.Info(name, r.holders, fence.Token(r.counter), r.now), nil
	}
	info := fence.LockInfo{Name: name, Held: r.held, LastToken: fence.Token(r.counter)}
	if info.Held {
		info.Token, info.Owner = fence.Token(r.tok), r.owner
		if r.pttl > 0 {
			info.ExpiresIn = time.Duration(r.pttl) * time.Millisecond
		}
	}
	return info, nil
}

// inspected is the inspect script's reply: a lock's holder (held, tok, pttl,
// owner), or the live semaphore or shared leases (holders, non-nil, with
// expiries as of now), and the counter (-1: not a token).
type inspected struct {
	held      bool
	tok, pttl int64
	owner     string
	counter   int64
	holders   []driver.Holding
	now       time.Time
}

// inspectReply decodes the {held, token, pttl, counter, owner, limit, shared,
// holders...} reply of the inspect script; ok is false for any other reply.
func inspectReply(res []any) (r inspected, ok bool) {
	if len(res) < 7 || (len(res)-7)%4 != 0 {
		return r, false
	}
	var n [7]int64
	for i := range n {
		if i == 4 {
			continue
		}
		if n[i], ok = res[i].(int64); !ok {
			return r, false
		}
	}
	if r.owner, ok = res[4].(string); !ok {
		return r, false
	}
	r.held, r.tok, r.pttl, r.counter = n[0] == 1, n[1], n[2], n[3]
	limit, shared := int(n[5]), n[6] == 1
	if limit == 0 && !shared {
		return r, len(res) == 7
	}
	r.now = time.Now()
	r.holders = make([]driver.Holding, 0, (len(res)-7)/4)
	for i := 7; i < len(res); i += 4 {
		slot, ok1 := res[i].(int64)
		tok, ok2 := res[i+1].(int64)
		ms, ok3 := res[i+2].(int64)
		owner, ok4 := res[i+3].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return r, false
		}
		r.holders = append(r.holders, driver.Holding{
			Slot: int(slot), Token: fence.Token(tok), Owner: owner, Limit: limit, Shared: shared,
			Expires: r.now.Add(time.Duration(ms) * time.Millisecond),
		})
	}
	return r, true
}

// clusterScanner is implemented by *goredis.ClusterClient: a Cluster is scanned
// master by master.
type clusterScanner interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *goredis.Client) error) error
}

// List returns the locks opts selects (see fence.Inspector), in name order, at
// most opts.Limit (fence.DefaultListLimit if <= 0): by default the held ones (a
// lease unexpired by Redis's clock, as Inspect judges it), with opts.All every
// name acquired or healed once (its counter is never deleted). It scans the
// keyspace for counters (SCAN, on every master of a Cluster), then inspects the
// names in order until it has opts.Limit of them, so it costs time proportional
// to the number of keys plus one round trip per name inspected; it is meant for
// operators (`fence status`), not hot paths. It returns fence.ErrInvalid for a
// prefix that is not a valid name; other errors are those of Inspect.
func (l *Locker) List(ctx context.Context, opts fence.ListOptions) ([]fence.LockInfo, error) {
	prefix := opts.Prefix
	if prefix != "" {
		if err := fence.ValidateName(prefix); err != nil {
			return nil, fmt.Errorf("redis: list %q: %w", prefix, err)
		}
	}
	if l.isClosed() {
		return nil, fmt.Errorf("redis: list %q: %w", prefix, fence.ErrClosed)
	}
	match := globEscape(l.prefix+"{"+escapeName(prefix)) + "*}" + tokenSuffix
	var mu sync.Mutex
	names := map[string]bool{}
	scan := func(ctx context.Context, c Client) error {
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return err
			}
			for _, key := range ks {
				tag := strings.TrimSuffix(strings.TrimPrefix(key, l.prefix+"{"), "}"+tokenSuffix)
				if name, err := unescapeName(tag); err == nil && fence.ValidateName(name) == nil {
					mu.Lock()
					names[name] = true
					mu.Unlock()
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	if cs, ok := l.client.(clusterScanner); ok {
		err = cs.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, l.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redis: list %q: %w", prefix, translate(err))
	}
	return driver.ListInspected(ctx, slices.Sorted(maps.Keys(names)), opts, l.Inspect)
}
