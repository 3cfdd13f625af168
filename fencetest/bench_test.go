package fencetest_test

import (
	"testing"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// The benchmarks on the reference implementation, lock against semaphore
// against shared lease on one Locker, as a backend runs them on its server.

func BenchmarkInmem_AcquireRelease(b *testing.B) {
	l := inmem.NewLocker(inmem.Options{})
	for _, k := range []struct {
		name string
		opts []fence.AcquireOption
	}{
		{"Lock", nil},
		{"Semaphore3", []fence.AcquireOption{fence.WithLimit(3)}},
		{"Shared", []fence.AcquireOption{fence.WithShared()}},
	} {
		b.Run(k.name, func(b *testing.B) { fencetest.BenchmarkAcquireRelease(b, l, k.opts...) })
	}
}

func BenchmarkInmem_Handoff(b *testing.B) {
	l := inmem.NewLocker(inmem.Options{})
	b.Run("Lock", func(b *testing.B) { fencetest.BenchmarkHandoff(b, l, l) })
	b.Run("SharedToExclusive", func(b *testing.B) { fencetest.BenchmarkHandoff(b, l, l, fence.WithShared()) })
	b.Run("Permit3", func(b *testing.B) { fencetest.BenchmarkPermitHandoff(b, l, l, 3) })
}
