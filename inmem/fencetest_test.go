package inmem_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

func TestLocker_Conformance(t *testing.T) {
	l := inmem.NewLocker(inmem.Options{})
	fencetest.TestLocker(t, func(t *testing.T) fence.Locker { return l })
}

func TestGuard_Conformance(t *testing.T) {
	g := inmem.NewGuard()
	fencetest.TestGuard(t, func(t *testing.T) fencetest.Guarded { return g })
}
