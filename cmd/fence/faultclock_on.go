//go:build faultclock

package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/internal/faultclock"
	"github.com/fencelock/fence/internal/faultclock/offset"
)

// processClock returns the clock of fence serve's embedded store and of a chaos
// worker's leases: with FENCE_FAULTCLOCK naming an offset file, a fault clock that
// the chaos harness steps by rewriting that file (see internal/faultclock); else
// nil, the system clock. It returns the error reading the file. Only a binary built
// with -tags faultclock has it; in the default build it is always nil.
var processClock = sync.OnceValues(func() (driver.Clock, error) {
	path := os.Getenv(offset.Env)
	if path == "" {
		return nil, nil
	}
	c, err := faultclock.Open(path, func(from, to time.Duration) {
		fmt.Fprintf(os.Stderr, "faultclock: stepped from %v to %v\n", from, to)
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "faultclock: offset %v from %s\n", c.Offset(), path)
	return c, nil
})
