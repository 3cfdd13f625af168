package fencetest_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// The suites pass against the reference implementation on the real clock, with
// one Locker and one Guard shared by every subtest, as a backend with one server
// per package runs them: the subtests' unique names keep them apart. (The inmem
// package runs them with a fresh Locker per subtest.)

func TestLocker_Inmem(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return l })
}

func TestGuard_Inmem(t *testing.T) {
	g := inmem.NewGuard()
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return g })
}
