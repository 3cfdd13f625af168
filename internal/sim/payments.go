package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// The payments scenario is the interview incident: a reconciliation job, run by
// two instances behind a TTL lock, pays the same batch twice. Each worker takes the
// batch lock, reads the ledger, claims the payment in the ledger, asks the payment
// provider to charge, and records the payout in the ledger. The provider is a
// third party: it cannot check fencing tokens, but it honours idempotency keys.
//
// Three protections, each toggled on its own:
//   - fencing: the ledger's claim and payout writes go through a guard with the
//     lease's fence (inmem.Guard.Do), so a stale holder is stopped before it
//     charges;
//   - idempotency key: charges carry a key derived from the payment, and the
//     provider replays the first charge instead of making another;
//   - unique constraint: the ledger refuses a second payout row for a payment.
//
// Fencing stops the stale-holder cases here because a worker claims the payment in
// the ledger before it calls the provider. A charge a stale holder had already sent
// before the new holder's claim would still reach the provider, which cannot check
// tokens: only the idempotency key stops that, and the retry case.

// Protections are the defences of the payments scenario.
type Protections struct {
	Fencing     bool // ledger writes carry the lease's fence and a guard checks it
	Idempotency bool // provider charges carry an idempotency key
	Unique      bool // the ledger has a unique constraint on the payment of a payout
}

// Names returns the names of the protections that are on, in a fixed order.
func (p Protections) Names() []string {
	var out []string
	if p.Fencing {
		out = append(out, "fencing")
	}
	if p.Idempotency {
		out = append(out, "idempotency key")
	}
	if p.Unique {
		out = append(out, "unique constraint")
	}
	return out
}

// Table is the payments scenario's table: for each case (row) and each set of
// protections (column), what reached the provider and the ledger.
type Table struct {
	Columns []string
	Rows    []TableRow
}

// TableRow is one case of the payments table.
type TableRow struct {
	Case  string
	Cells []Cell
}

// Cell is the outcome of one case under one set of protections.
type Cell struct {
	Charges int // charges the provider made for the payment
	Payouts int // payout rows the ledger holds for it
}

// Duplicate reports whether the payment was charged or recorded more than once.
func (c Cell) Duplicate() bool { return c.Charges > 1 || c.Payouts > 1 }

// String returns "ok" or what was duplicated, e.g. "DUP: 2 charges, 2 rows".
func (c Cell) String() string {
	var parts []string
	if c.Charges > 1 {
		parts = append(parts, fmt.Sprintf("%d charges", c.Charges))
	}
	if c.Payouts > 1 {
		parts = append(parts, fmt.Sprintf("%d rows", c.Payouts))
	}
	if len(parts) == 0 {
		return "ok"
	}
	return "DUP: " + strings.Join(parts, ", ")
}

var protectionColumns = []struct {
	name string
	p    Protections
}{
	{"TTL lock only", Protections{}},
	{"+ fencing", Protections{Fencing: true}},
	{"+ idempotency key", Protections{Idempotency: true}},
	{"+ unique constraint", Protections{Unique: true}},
	{"all three", Protections{Fencing: true, Idempotency: true, Unique: true}},
}

type payCase struct {
	name  string
	title string
	setup func(m *payModel)
}

var payCases = []payCase{
	{"pause", "A pauses (GC) past its TTL between reading the ledger and claiming the payment", func(m *payModel) {
		m.outlivesLease(flow{pauseAfterRead: T(39)})
	}},
	{"failover", "the lock service fails over to a replica that missed A's lock key and its token", func(m *payModel) {
		s := m.s
		a, b := s.worker("A"), s.worker("B")
		snap := s.locker.Snapshot()
		s.system(T(0), func() { snap = s.snapshot(m.lock) })
		m.process(a, T(0), flow{})
		s.system(T(3), func() { s.failover(m.lock, snap) })
		m.process(b, T(4), flow{})
	}},
	{"clock-jump", "the lock server's clock jumps forward and expires A's key early while A works", func(m *payModel) {
		s := m.s
		a, b := s.worker("A"), s.worker("B")
		m.process(a, T(0), flow{prepare: T(10)})
		s.system(T(3), func() { s.jumpClock(T(30)) })
		m.process(b, T(4), flow{})
	}},
	{"delayed-write", "A's claim is delayed in the network until after B has paid", func(m *payModel) {
		m.outlivesLease(flow{claimDelay: T(38)})
	}},
	{"retry", "the provider call times out but had succeeded; A retries it", func(m *payModel) {
		s := m.s
		a := s.worker("A")
		m.dropResponses = 1
		m.process(a, T(0), flow{})
	}},
}

// outlivesLease plays worker A from the start with fl, which keeps it working past
// its lease's TTL (30), and worker B from T(31), just after A's lease expired.
func (m *payModel) outlivesLease(fl flow) {
	a, b := m.s.worker("A"), m.s.worker("B")
	m.process(a, T(0), fl)
	m.process(b, T(31), flow{})
}

// payModel is the ledger and the provider of one payments run.
type payModel struct {
	s       *sim
	prot    Protections
	lock    string
	payment string
	amount  string

	claimedBy     string   // ledger: lease label of the current claim
	payouts       []string // ledger: payout rows for the payment (charge ids)
	charges       []string // provider: charges made for the payment
	idem          map[string]string
	dropResponses int // provider responses lost in the network
}

// flow is how one worker's run of the batch goes wrong.
type flow struct {
	pauseAfterRead time.Duration // a GC pause right after reading the ledger
	prepare        time.Duration // work between reading and claiming
	claimDelay     time.Duration // the claim is delayed in the network this long
}

const (
	callLatency = 2 * Tick // provider request (and response) latency
	callTimeout = 6 * Tick // the client's timeout for a provider call
	provider    = "provider"
)

var errDuplicatePayout = errors.New(`ledger: duplicate key value violates unique constraint "payouts_payment_key"`)

// process runs the batch job of worker w, starting at start.
func (m *payModel) process(w *worker, start time.Duration, fl flow) {
	s := m.s
	s.at(start, w, func() {
		lease, err := s.acquire(w, m.lock, T(30))
		if err != nil {
			s.note(w, "the batch lock is held: skips the batch")
			return
		}
		s.after(T(1), w, func() {
			paid := len(m.payouts) > 0
			state := "not paid"
			if paid {
				state = "already paid"
			}
			s.emit(Event{Worker: w.name, Kind: KindRead, Resource: ledger, Value: state,
				Text: fmt.Sprintf("read %q: %s is %s", ledger, m.payment, state),
				Peer: ledger, Request: "read " + m.payment, Reply: state, OK: true})
			if paid {
				s.release(w)
				return
			}
			if fl.pauseAfterRead > 0 {
				s.pause(w, fl.pauseAfterRead, "GC")
			}
			s.after(T(1)+fl.prepare, w, func() { m.claim(w, lease, fl.claimDelay) })
		})
	})
}

// claim records in the ledger that w's lease is paying the payment.
func (m *payModel) claim(w *worker, lease *fence.Lease, delay time.Duration) {
	s := m.s
	label := w.label
	f := lease.Fence()
	what := fmt.Sprintf("claim %s in %q", m.payment, ledger)
	arrive := func() {
		err := s.commit(w, ledger, "claim", what, "claimed by "+label, f, label, delay > 0, func() error {
			m.claimedBy = label
			return nil
		})
		s.at(s.now, w, func() {
			if err != nil {
				s.heal(w, m.lock, err)
				s.note(w, "fenced off: stops without charging")
				s.release(w)
				return
			}
			s.after(T(1), w, func() { m.charge(w, f, label, 1) })
		})
	}
	if delay == 0 {
		arrive()
		return
	}
	s.run.InFlight = append(s.run.InFlight, Span{Worker: w.name, Start: s.now, End: -1,
		Label: fmt.Sprintf("claim token %d in flight", f.Token)})
	idx := len(s.run.InFlight) - 1
	s.emit(Event{Worker: w.name, Kind: KindSend, Resource: ledger, Token: f.Token, Lease: label, Op: "claim",
		Text: fmt.Sprintf("send %s with token %d; the network delays it %v", what, f.Token, delay),
		Peer: ledger, Request: fmt.Sprintf("claim token %d (delayed %v)", f.Token, delay)})
	s.network(s.now+delay, func() {
		s.run.InFlight[idx].End = s.now
		arrive()
	})
}

// charge asks the provider to charge the payment (attempt n), then records the
// payout.
func (m *payModel) charge(w *worker, f fence.Fence, label string, n int) {
	s := m.s
	key := ""
	if m.prot.Idempotency {
		key = "idem-" + m.payment
	}
	req := "charge " + m.payment + " " + m.amount
	if key != "" {
		req += " (key " + key + ")"
	}
	s.emit(Event{Worker: w.name, Kind: KindCall, Value: req,
		Text: fmt.Sprintf("call provider: %s, attempt %d", req, n), Peer: provider, Request: fmt.Sprintf("%s, attempt %d", req, n)})
	answered := false
	s.network(s.now+callLatency, func() {
		id, replay := "", false
		if key != "" {
			id, replay = m.idem[key]
		}
		text := ""
		if replay {
			text = fmt.Sprintf("provider: key %s seen before: replays %s, no new charge", key, id)
		} else {
			id = fmt.Sprintf("ch_%d", len(m.charges)+1)
			m.charges = append(m.charges, id)
			if key != "" {
				m.idem[key] = id
			}
			text = fmt.Sprintf("provider: charges %s %s as %s", m.payment, m.amount, id)
			if len(m.charges) > 1 {
				text += fmt.Sprintf(": DUPLICATE, %d charges for %s", len(m.charges), m.payment)
			}
		}
		s.emit(Event{Kind: KindCall, Value: id, Text: text, Peer: provider, Request: text})
		if m.dropResponses > 0 {
			m.dropResponses--
			s.note(nil, "the provider's response to %s's call is lost in the network", w.name)
			return
		}
		s.network(s.now+callLatency, func() {
			s.at(s.now, w, func() {
				if answered {
					return
				}
				answered = true
				s.emit(Event{Worker: w.name, Kind: KindCall, Value: id,
					Text: fmt.Sprintf("provider answers: %s", id), Peer: provider, Reply: id, OK: true})
				m.record(w, f, label, id)
			})
		})
	})
	s.after(callTimeout, w, func() {
		if answered {
			return
		}
		answered = true
		s.emit(Event{Worker: w.name, Kind: KindCall, Text: fmt.Sprintf("provider call timed out after %v: retries", callTimeout),
			Request: fmt.Sprintf("no answer after %v: retries", callTimeout)})
		m.charge(w, f, label, n+1)
	})
}

// record inserts the payout row for charge id, then releases the lock.
func (m *payModel) record(w *worker, f fence.Fence, label, id string) {
	s := m.s
	what := fmt.Sprintf("insert payout (%s, %s) into %q", m.payment, id, ledger)
	s.commit(w, ledger, "payout "+id, what, "payout "+id, f, label, false, func() error {
		if m.prot.Unique && len(m.payouts) > 0 {
			return errDuplicatePayout
		}
		m.payouts = append(m.payouts, id)
		return nil
	})
	s.after(T(1), w, func() { s.release(w) })
}

// payments runs every case with every protection set for the table, and returns
// the runs of the requested mode: no protections (fencing off) or all three (on).
func payments(o Options, fencing bool) (*Report, error) {
	rep := &Report{Scenario: "payments", Seed: o.Seed, Table: &Table{}}
	for _, col := range protectionColumns {
		rep.Table.Columns = append(rep.Table.Columns, col.name)
	}
	for _, pc := range payCases {
		row := TableRow{Case: pc.name}
		for _, col := range protectionColumns {
			run, cell, err := paymentsCase(pc, col.p, o.Seed)
			if err != nil {
				return nil, err
			}
			row.Cells = append(row.Cells, cell)
			all := col.p.Fencing && col.p.Idempotency && col.p.Unique
			none := !col.p.Fencing && !col.p.Idempotency && !col.p.Unique
			if (fencing && all) || (!fencing && none) {
				rep.Runs = append(rep.Runs, run)
			}
		}
		rep.Table.Rows = append(rep.Table.Rows, row)
	}
	return rep, nil
}

func paymentsCase(pc payCase, p Protections, seed uint64) (*Run, Cell, error) {
	s := newSim("payments", p.Fencing, seed, T(30))
	s.run.Case = pc.name
	s.run.Title = pc.title
	s.run.Protections = p.Names()
	m := &payModel{s: s, prot: p, lock: "payments-batch-7", payment: "pay-1001", amount: "$120.00", idem: make(map[string]string)}
	pc.setup(m)
	if err := s.loop(); err != nil {
		return nil, Cell{}, err
	}
	s.run.Violations = CheckWrites(s.run.Writes)
	cell := Cell{Charges: len(m.charges), Payouts: len(m.payouts)}
	prot := "none (TTL lock only)"
	if names := p.Names(); len(names) > 0 {
		prot = strings.Join(names, ", ")
	}
	r := s.run
	r.Outcome = append(r.Outcome, "protections: "+prot)
	r.Outcome = append(r.Outcome, fmt.Sprintf("provider charged %s %d time(s): %s", m.payment, len(m.charges), strings.Join(m.charges, ", ")))
	r.Outcome = append(r.Outcome, fmt.Sprintf("ledger holds %d payout row(s) for %s: %s", len(m.payouts), m.payment, strings.Join(m.payouts, ", ")))
	if cell.Duplicate() {
		r.Outcome = append(r.Outcome, "DUPLICATE: "+strings.TrimPrefix(cell.String(), "DUP: "))
	} else {
		r.Outcome = append(r.Outcome, "no duplicate: paid once, recorded once")
	}
	return r, cell, nil
}
