//go:build !faultclock

package main

import "github.com/fencelock/fence/driver"

// processClock returns nil, the system clock: the default build has no fault clock
// (build with -tags faultclock for the one chaos steps; see faultclock_on.go). It
// returns no error.
func processClock() (driver.Clock, error) { return nil, nil }
