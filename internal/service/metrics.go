package service

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the service's Prometheus series, whatever the wire. Names are part
// of the contract of `fence serve` (dashboards rely on them). A wire counts its
// own requests (fence_http_requests_total).
type metrics struct {
	grants         prometheus.Counter
	acquireSeconds *prometheus.HistogramVec // label result: granted, held, error
	waits          prometheus.Counter
	waitSeconds    prometheus.Histogram
	stale          prometheus.Counter
	unissued       prometheus.Counter
	lost           prometheus.Counter
	revokes        prometheus.Counter
	kvWrites       prometheus.Counter
	blocking       prometheus.Gauge
	held           *heldSet

	acquireGranted, acquireHeld, acquireError prometheus.Observer
}

func newMetrics(reg *prometheus.Registry, held *heldSet) *metrics {
	m := &metrics{
		grants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_grants_total", Help: "Leases granted.",
		}),
		acquireSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fence_acquire_seconds",
			Help:    "Time to answer an acquire request, waiting included, by result (granted, held, error).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"result"}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_waits_total", Help: "Acquire requests that found the lock held and waited for it.",
		}),
		waitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fence_wait_seconds",
			Help:    "Time acquire requests spent waiting for a held lock, whatever the outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_stale_rejections_total", Help: "Fenced writes refused: stale token or token of another lock.",
		}),
		unissued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_unissued_rejections_total", Help: "Fenced writes refused: a token or lease the store never issued for the lock (P9).",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_lost_leases_total", Help: "Renewals answered 410: the lease had expired or was taken over.",
		}),
		revokes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_revokes_total", Help: "Leases ended by revoke (an operator's force-release).",
		}),
		kvWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_kv_writes_total", Help: "Fenced writes (puts and deletes) accepted by the KV store.",
		}),
		blocking: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fence_blocking_queries_in_flight", Help: "Blocking queries (GET /v1/locks/{name}?index=N) waiting for a change.",
		}),
		held: held,
	}
	m.acquireGranted = m.acquireSeconds.WithLabelValues("granted")
	m.acquireHeld = m.acquireSeconds.WithLabelValues("held")
	m.acquireError = m.acquireSeconds.WithLabelValues("error")
	reg.MustRegister(m.grants, m.acquireSeconds, m.waits, m.waitSeconds, m.stale, m.unissued, m.lost, m.revokes, m.kvWrites, m.blocking,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fence_held_locks",
			Help: "Locks held through this server: granted, neither released nor expired by the server's clock.",
		}, func() float64 { return float64(held.count(time.Now())) }))
	return m
}

// newRegistry returns a registry with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// heldSet tracks the leases granted through this server and when they expire, by
// lock name, for the fence_held_locks gauge: a name counts while any of its leases
// (a lock's one, a semaphore's permits, a shared lock's holders) is unexpired. It
// never holds lease ids, nor names: only their hashes under a seed of its own, so
// a held lease costs it one map slot of 32 bytes (a lock name's first lease is
// kept in the slot; only further leases of a semaphore or shared lock take a map
// of their own). Two names whose 64-bit hashes collide would count as one: at a
// million names that is about one chance in 10^7, and it only skews a gauge.
//
// Over a store that counts its held names itself (a heldCounter: the embedded
// store, which only this process can open) it records nothing and reports the
// store's count, so that a held lease costs the server no memory beside the
// store's.
type heldSet struct {
	store     heldCounter // non-nil: the count is the store's
	mu        sync.Mutex
	seed      maphash.Seed
	base      time.Time           // expiries are nanoseconds since base (monotonic)
	names     map[uint64]heldName // name hash -> its leases
	leases    int
	nextPrune int
}

// heldName is the leases of one name: the first in lease and until, the others in
// more (nil for a lock).
type heldName struct {
	lease uint64           // hash of the first lease's id
	until int64            // its expiry (since heldSet.base); 0: none
	more  map[uint64]int64 // lease hash -> expiry, of the other leases
}

// heldCounter is a store that counts the lock names it holds a live lease on
// (bolt.Store.HeldLocks).
type heldCounter interface{ HeldLocks() int }

// newHeldSet returns the set for the leases granted over locker: one that asks
// locker, if it is a heldCounter, else one that records them.
func newHeldSet(locker any) *heldSet {
	if c, ok := locker.(heldCounter); ok {
		return &heldSet{store: c}
	}
	return &heldSet{seed: maphash.MakeSeed(), base: time.Now(), names: make(map[uint64]heldName), nextPrune: 1024}
}

// at returns t as an expiry of h: at least 1, since 0 means none.
func (h *heldSet) at(t time.Time) int64 { return max(int64(t.Sub(h.base)), 1) }

// set records that lease id on name expires at until.
func (h *heldSet) set(name, id string, until time.Time) {
	if h.store != nil {
		return
	}
	nk, lk, u := maphash.String(h.seed, name), maphash.String(h.seed, id), h.at(until)
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names[nk]
	switch _, more := n.more[lk]; {
	case n.until != 0 && n.lease == lk:
		n.until = u
	case more:
		n.more[lk] = u
	case n.until == 0:
		n.lease, n.until = lk, u
		h.leases++
	default:
		if n.more == nil {
			n.more = make(map[uint64]int64, 1)
		}
		n.more[lk] = u
		h.leases++
	}
	h.names[nk] = n
	if h.leases >= h.nextPrune { // bound memory when nobody scrapes
		h.pruneLocked(time.Now())
		h.nextPrune = 2*h.leases + 1024
	}
}

// remove forgets lease id on name (released).
func (h *heldSet) remove(name, id string) {
	if h.store != nil {
		return
	}
	nk, lk := maphash.String(h.seed, name), maphash.String(h.seed, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := h.names[nk]
	if !ok {
		return
	}
	if _, more := n.more[lk]; more {
		delete(n.more, lk)
		h.leases--
	} else if n.until != 0 && n.lease == lk {
		n.until = 0
		h.leases--
	}
	h.putLocked(nk, n)
}

// putLocked stores n as the leases of name hash nk: with a lease of more moved
// up to the first if that one is gone, and nothing if n has no lease left.
func (h *heldSet) putLocked(nk uint64, n heldName) {
	if n.until == 0 {
		for lk, u := range n.more {
			n.lease, n.until = lk, u
			delete(n.more, lk)
			break
		}
	}
	if len(n.more) == 0 {
		n.more = nil
	}
	if n.until == 0 {
		delete(h.names, nk)
		return
	}
	h.names[nk] = n
}

// removeAll forgets every lease on name (revoked).
func (h *heldSet) removeAll(name string) {
	if h.store != nil {
		return
	}
	nk := maphash.String(h.seed, name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.names[nk]; ok {
		h.leases -= 1 + len(n.more)
		delete(h.names, nk)
	}
}

// count returns the number of names with an unexpired lease at now.
func (h *heldSet) count(now time.Time) int {
	if h.store != nil {
		return h.store.HeldLocks()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	return len(h.names)
}

func (h *heldSet) pruneLocked(now time.Time) {
	t := int64(now.Sub(h.base))
	for nk, n := range h.names {
		if n.until > t && len(n.more) == 0 {
			continue
		}
		for lk, u := range n.more {
			if u <= t {
				delete(n.more, lk)
				h.leases--
			}
		}
		if n.until <= t {
			n.until = 0
			h.leases--
		}
		h.putLocked(nk, n)
	}
}
