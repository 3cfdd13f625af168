package bolt

import (
	"fmt"
	"runtime"
	"time"
)

// flushGen is one commit (the flusher's or a caller's, see lead); its done closes
// after it.
type flushGen struct {
	s      *Store // whose commit it is
	done   chan struct{}
	err    error
	grants int // grants waiting for this commit (for the benchmarks)
}

// wait returns once g's commit is done, with its error: nil when everything
// changed before g was taken is on disk. It starts the commit (see lead).
func (g *flushGen) wait() error {
	g.s.lead(g)
	<-g.done
	return g.err
}

// lead starts the commit of g, which must have come from syncLocked: a caller
// that finds no commit running writes g itself, on its own goroutine; otherwise
// it asks the flusher, which writes g once the running commit is done (the
// callers that arrive meanwhile share it). Handing every commit to the flusher
// cost two goroutine wakeups per operation (the flusher's, then the caller's),
// which with idle CPUs took longer than the fdatasync itself: behind fence
// serve's HTTP handler, an uncontended operation took 0.45ms with the handoff
// and 0.30ms without it (0.17ms in process either way: the wakeups stay on one
// CPU there). Under load a commit is running when most operations arrive, so
// the flusher runs most commits, as before. A checkpoint the commit makes due
// runs on the same goroutine, after g is done: the next commit would wait for
// it anyway. s.mu must not be held.
func (s *Store) lead(g *flushGen) {
	if !s.fmu.TryLock() {
		s.kickFlusher()
		return
	}
	// Let the callers the last commit woke queue their next operation first, so
	// that under load it joins this commit rather than waiting for the next one
	// (as the flusher does; when nothing else is runnable this returns at once).
	runtime.Gosched()
	s.mu.Lock()
	// After Close began, Close's last commit (or a test's kill -9) ends g.
	mine := s.pending == g && !s.isClose
	s.mu.Unlock()
	if mine {
		_ = s.flushLocked()
	}
	s.fmu.Unlock()
}

// flusher writes dirty entries and the token ceiling when kicked, and checks the
// wall clock for a step every interval; one commit serves everyone waiting
// (group commit): operations that arrive while a commit runs share the next.
func (s *Store) flusher() {
	defer close(s.stopped)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-t.C:
			s.mu.Lock()
			s.readLocked(s.clock.Now())
			s.mu.Unlock()
		case <-s.stop:
			return
		}
		// Let the callers the last commit woke queue their next operation, so
		// that it joins this commit rather than waiting for the one after.
		runtime.Gosched()
		_ = s.flushOnce()
	}
}

// kickFlusher asks the flusher to run now, without waiting. s.mu need not be
// held.
func (s *Store) kickFlusher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// syncLocked returns the flush that will include everything changed so far;
// the caller's wait, after it unlocks s.mu, starts it. s.mu must be held.
func (s *Store) syncLocked() *flushGen {
	return s.pending
}

// maxTxRecords bounds one commit, so a million dirty entries do not make one
// huge transaction.
const maxTxRecords = 20000

// flushOnce runs one flush: it writes every dirty entry as it is now (the
// latest state of each name, however many operations changed it) and, when
// needed, a higher token ceiling, then closes the generation it took over.
func (s *Store) flushOnce() error {
	// One flush at a time, so that an older snapshot of an entry is never
	// committed after a newer one.
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.flushLocked()
}

// flushLocked is flushOnce with s.fmu held: the flusher's, or a caller's (see
// lead).
func (s *Store) flushLocked() error {
	s.mu.Lock()
	g := s.pending
	s.pending = &flushGen{s: s, done: make(chan struct{})}
	ents := s.dirty
	s.dirty = nil
	recs := make([]lockRec, 0, len(ents))
	for _, e := range ents {
		e.dirty = false
		recs = append(recs, lockRec{name: e.name, val: s.encodeLock(e)})
	}
	newCeil, ceilRec := s.ceil, uint64(0)
	if s.next-1+s.block/2 > s.ceil {
		newCeil = s.next - 1 + s.block
		ceilRec = newCeil
	}
	s.mu.Unlock()

	// One write and one fdatasync of the lease log; the bbolt file gets the
	// records at the next checkpoint.
	var err error
	var logged int64
	if len(recs) > 0 || ceilRec != 0 {
		logged, err = s.wal.append(recs, ceilRec)
	}
	if err != nil {
		// No "bolt:": the operations that waited for this flush add it.
		err = writeError(s.wal.path, err)
	}

	s.mu.Lock()
	if err == nil {
		s.ceil = newCeil
		for _, r := range recs {
			s.wal.names[r.name] = r.val
		}
	}
	if len(recs) > 0 {
		s.statCommits++
		s.statGrants += int64(g.grants)
	}
	for _, e := range ents {
		switch {
		case err != nil:
			if !e.dirty {
				e.dirty = true
				s.dirty = append(s.dirty, e)
			}
		case !e.dirty && !e.held() && (e.x == nil || e.x.wake == nil) && s.locks[e.name] == e && uint64(e.last) < s.next:
			// Its last token is on disk now, and below the shared counter: a
			// grant needs it no more. A name healed above the counter keeps its
			// entry, its floor (see grantLocked).
			delete(s.locks, e.name)
		}
	}
	s.shrinkLocked()
	s.mu.Unlock()
	g.err = err
	close(g.done)
	if err == nil && logged > s.wal.checkpointAt {
		_ = s.checkpointLocked(false) // on failure the log keeps growing; retried next flush
	}
	return err
}

// checkpointLocked folds the lease log into the bbolt file and starts the log
// afresh. s.fmu must be held (it keeps the flusher out, the log's only writer).
func (s *Store) checkpointLocked(clean bool) error {
	w := s.wal
	if w.off <= walHeaderLen && len(w.names) == 0 && w.ceil == 0 && !clean {
		return nil
	}
	gen := w.gen + 1
	if err := w.fold(s.db, w.names, w.ceil, gen, clean); err != nil {
		return fmt.Errorf("bolt: checkpoint: %w", writeError(s.path, err))
	}
	if err := w.reset(gen); err != nil {
		w.resetTo = gen // the next append retries it first
		return fmt.Errorf("bolt: checkpoint: %w", writeError(w.path, err))
	}
	s.mu.Lock()
	w.names = make(map[string][]byte)
	s.mu.Unlock()
	dropMapped(s.db)
	return nil
}
