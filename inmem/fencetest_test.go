package inmem_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

func TestLocker_Conformance(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return inmem.NewLocker(inmem.Options{}) })
}

func TestGuard_Conformance(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return inmem.NewGuard() })
}

// A late attempt of a write never replaces a later write of the same holder (P3).
func TestWriteAttempts_Conformance(t *testing.T) {
	fencetest.TestWriteAttempts(t, func(t *testing.T) fencetest.Guarded { return inmem.NewGuard() })
}
