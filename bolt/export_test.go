package bolt

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fence"
)

// What the tests do to a store that the product never does: stop it as kill -9
// would, checkpoint often, and break it on purpose for the negative controls.
// None of it is compiled into the product.

// abandon stops the store as kill -9 would: nothing more is written, the file
// keeps what the last commit left in it, and the calls waiting for a commit
// fail with fence.ErrClosed.
func (s *Store) abandon() {
	if !s.shut() { // the flusher stopped without a last commit
		return
	}
	s.mu.Lock()
	s.pending.err = fence.ErrClosed // nothing more is written: fail those waiting
	close(s.pending.done)
	s.mu.Unlock()
	s.life.Lock()
	s.fmu.Lock() // a caller's commit may be running (see lead)
	_ = s.wal.close()
	_ = s.db.Close()
	s.fmu.Unlock()
	s.life.Unlock()
}

// setCheckpointAt makes s checkpoint once its lease log holds more than n
// bytes, so that a test sees checkpoints (and the crash test kills the store in
// the middle of them) after a few commits.
func (s *Store) setCheckpointAt(n int64) {
	s.fmu.Lock() // the flusher reads it under fmu
	s.wal.checkpointAt = n
	s.fmu.Unlock()
}

// Faults of the crash tests' negative controls: the store forgets after a
// restart what it must remember, and the checker must catch it.
const (
	forgetTokens = "tokens" // the token ceiling: tokens start again at 1
	forgetLeases = "leases" // the written leases
	forgetOwners = "owners" // the owners of the leases it restores
	forgetFloors = "floors" // the tokens of names healed above the shared counter
	forgetGrace  = "grace"  // that names were free: every grant refused for 300ms, as the lease horizon did
	forgetLog    = "log"    // the lease log's records (they are zeroed before the open)
	// forgetSteps, the forward steps of the wall clock, is no fault of Open:
	// the child gives the store a wall clock that does not show them (the next
	// run's does), which writes the file exactly as a store ignoring them would.
	forgetSteps = "steps"
)

// openBroken opens the store at path as Open does, made to forget what broken
// names (one of the forget constants; "" for nothing).
func openBroken(path string, o *Options, broken string) (*Store, error) {
	var forget func(*recovered)
	switch broken {
	case "", forgetSteps:
	case forgetTokens:
		forget = func(r *recovered) { r.next = 1 }
	case forgetLeases:
		forget = func(r *recovered) { r.restored = nil }
	case forgetOwners:
		forget = func(r *recovered) {
			for _, e := range r.restored {
				e.h.setOwner("", "")
				if e.x != nil {
					for _, h := range e.x.holds {
						h.setOwner("", "")
					}
				}
			}
		}
	case forgetFloors:
		forget = func(r *recovered) { r.floors = nil }
	case forgetGrace:
		forget = func(r *recovered) { r.horizon = max(r.horizon, r.nowWall+int64(300*time.Millisecond)) }
	case forgetLog:
		if err := zeroLogRecords(path); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("openBroken: no fault %q", broken)
	}
	return open(path, o, forget)
}

// zeroLogRecords overwrites the records of the lease log of the store at path
// with zeros, keeping its header: replay stops at the first zero record, so
// Open finds a log of the right generation with nothing in it.
func zeroLogRecords(path string) error {
	f, err := os.OpenFile(path+"-wal", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if n := fi.Size() - walHeaderLen; n > 0 {
		_, err = f.WriteAt(make([]byte, n), walHeaderLen)
	}
	return err
}
