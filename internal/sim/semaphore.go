package sim

import (
	"fmt"

	"github.com/fencelock/fence"
)

const (
	partitionsLock = "partitions"
	// defaultPermits is the semaphore's size when Options.Workers is 0.
	defaultPermits = 3
)

// partition is the resource of slot k: one guard (one highest token) per slot,
// as fence.WithLimit says a semaphore's resources are fenced.
func partition(k int) string { return fmt.Sprintf("partition-%d", k) }

// semaphorePause is a paused permit holder on a semaphore of n permits (n from
// Options.Workers, 0 meaning 3). Workers A, B, ... take the n permits (slots 0 to
// n-1) and write their partitions; the holder of slot k, drawn from the seed,
// pauses past its TTL while the others renew; the newcomer is refused while all
// permits are held, is granted slot k once its lease expires and writes
// partition k; the paused holder wakes and writes partition k too. Unfenced both
// writes land and the newcomer's is lost; fenced, partition k's guard refuses the
// stale token, while the other partitions accept their holders' lower tokens:
// each slot's resource keeps its own highest token from the name's one counter.
func semaphorePause(o Options, fencing bool) (*Report, error) {
	n := o.Workers
	if n == 0 {
		n = defaultPermits
	}
	if n < 2 || n > 25 {
		return nil, fmt.Errorf("sim: semaphore-pause needs 2 to 25 permits (workers), got %d: %w", n, fence.ErrInvalid)
	}
	ttl := T(30)
	s := newSim("semaphore-pause", fencing, o.Seed, ttl)
	k := s.rng.IntN(n)
	s.run.Title = fmt.Sprintf("a semaphore of %d permits: the holder of slot %d (drawn from the seed) pauses past its TTL; "+
		"the next holder of slot %d writes partition %d; the paused one wakes and writes it too", n, k, k, k)
	holders := make([]*worker, n)
	for i := range holders {
		holders[i] = s.worker(string(rune('A' + i)))
	}
	late := s.worker(string(rune('A' + n)))

	// batch writes w's next batch to the partition of its current permit.
	batch := func(w *worker, i int) {
		if w.lease != nil {
			s.write(w, partition(w.lease.Slot()), fmt.Sprintf("%s's batch %d", w.name, i), 0, nil)
		}
	}
	for _, w := range holders {
		s.at(T(0), w, func() {
			if _, err := s.acquirePermit(w, partitionsLock, ttl, n); err == nil {
				batch(w, 1)
			}
		})
	}
	var stale *worker // the holder of slot k, paused when its renewal was due
	s.at(T(10), nil, func() {
		for _, w := range holders {
			if w.lease != nil && w.lease.Slot() == k {
				stale = w
				s.pause(w, T(22), "GC")
			}
		}
	})
	for _, w := range holders {
		s.at(T(20), w, func() {
			if w != stale {
				s.renew(w, ttl)
			}
		})
	}
	s.at(T(25), late, func() { s.acquirePermit(late, partitionsLock, ttl, n) })
	s.at(T(31), late, func() {
		if _, err := s.acquirePermit(late, partitionsLock, ttl, n); err == nil {
			batch(late, 1)
		}
	})
	// The paused holder's write at T32 waits for it to wake (its actions queue
	// behind the pause); the others write their second batch after it.
	for _, w := range holders {
		s.at(T(32), w, func() { batch(w, 2) })
	}
	for _, w := range append(holders, late) {
		s.at(T(34), w, func() {
			if w.lease != nil && w.lease.Err() == nil {
				s.release(w)
			}
		})
	}
	return single(s)
}
