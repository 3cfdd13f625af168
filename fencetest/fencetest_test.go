package fencetest_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// The suites pass against the reference implementation on the real clock.

func TestLocker_Inmem(t *testing.T) {
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker {
		return inmem.NewLocker(inmem.Options{})
	})
}

func TestGuard_Inmem(t *testing.T) {
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return inmem.NewGuard() })
}

// One locker shared by every subtest, as a backend with one server per package
// runs it: the subtests' unique names keep them apart.
func TestLocker_InmemShared(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return l })
}

func TestGuard_InmemShared(t *testing.T) {
	g := inmem.NewGuard()
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return g })
}
