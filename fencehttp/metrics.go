package fencehttp

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus series. Names are part of the contract of
// `fence serve` (dashboards rely on them).
type metrics struct {
	grants         prometheus.Counter
	acquireSeconds *prometheus.HistogramVec // label result: granted, held, error
	waits          prometheus.Counter
	waitSeconds    prometheus.Histogram
	stale          prometheus.Counter
	lost           prometheus.Counter
	revokes        prometheus.Counter
	kvWrites       prometheus.Counter
	requests       *prometheus.CounterVec // labels route, code
	blocking       prometheus.Gauge
	held           *heldSet
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
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_lost_leases_total", Help: "Renewals answered 410: the lease had expired or was taken over.",
		}),
		revokes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_revokes_total", Help: "Leases ended by revoke (an operator's force-release).",
		}),
		kvWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fence_kv_writes_total", Help: "Fenced writes accepted by the KV store.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fence_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		blocking: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fence_blocking_queries_in_flight", Help: "Blocking queries (GET /v1/locks/{name}?index=N) waiting for a change.",
		}),
		held: held,
	}
	reg.MustRegister(m.grants, m.acquireSeconds, m.waits, m.waitSeconds, m.stale, m.lost, m.revokes, m.kvWrites, m.requests, m.blocking,
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
// never holds lease ids, only their hashes under a seed of its own.
type heldSet struct {
	mu        sync.Mutex
	seed      maphash.Seed
	expiry    map[string]map[uint64]time.Time // name -> lease hash -> expiry
	leases    int
	nextPrune int
}

func newHeldSet() *heldSet {
	return &heldSet{seed: maphash.MakeSeed(), expiry: make(map[string]map[uint64]time.Time), nextPrune: 1024}
}

// set records that lease id on name expires at until.
func (h *heldSet) set(name, id string, until time.Time) {
	key := maphash.String(h.seed, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.expiry[name]
	if m == nil {
		m = make(map[uint64]time.Time, 1)
		h.expiry[name] = m
	}
	if _, ok := m[key]; !ok {
		h.leases++
	}
	m[key] = until
	if h.leases >= h.nextPrune { // bound memory when nobody scrapes
		h.pruneLocked(time.Now())
		h.nextPrune = 2*h.leases + 1024
	}
}

// remove forgets lease id on name (released).
func (h *heldSet) remove(name, id string) {
	key := maphash.String(h.seed, id)
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.expiry[name]; m != nil {
		if _, ok := m[key]; ok {
			h.leases--
			delete(m, key)
		}
		if len(m) == 0 {
			delete(h.expiry, name)
		}
	}
}

// removeAll forgets every lease on name (revoked).
func (h *heldSet) removeAll(name string) {
	h.mu.Lock()
	h.leases -= len(h.expiry[name])
	delete(h.expiry, name)
	h.mu.Unlock()
}

// count returns the number of names with an unexpired lease at now.
func (h *heldSet) count(now time.Time) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	return len(h.expiry)
}

func (h *heldSet) pruneLocked(now time.Time) {
	for name, m := range h.expiry {
		for key, t := range m {
			if !t.After(now) {
				delete(m, key)
				h.leases--
			}
		}
		if len(m) == 0 {
			delete(h.expiry, name)
		}
	}
}
