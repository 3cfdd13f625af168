package election_test

import (
	"testing"

	"github.com/fencelock/fence/fencetest"
	"github.com/fencelock/fence/inmem"
)

// The handoff after a leader resigns, on the reference Locker: alone (see
// fencetest.BenchmarkResignHandoff), and interleaved round by round with a
// lock's handoff after a release, whose ratio is the first target
// (within 2x):
//
//	go test -run '^$' -bench ResignHandoff -benchtime 200x ./election/
func BenchmarkResignHandoff(b *testing.B) {
	b.Run("inmem", func(b *testing.B) {
		l := inmem.NewLocker(inmem.Options{})
		fencetest.BenchmarkResignHandoff(b, l, l)
	})
	b.Run("inmem/vs-lock", func(b *testing.B) {
		l := inmem.NewLocker(inmem.Options{})
		fencetest.BenchmarkHandoffInterleaved(b,
			fencetest.HandoffSubject{Name: "election", Holder: fencetest.ElectionMutex(l, "bench-election"), Waiter: fencetest.ElectionMutex(l, "bench-election")},
			fencetest.HandoffSubject{Name: "lock", Holder: fencetest.LockerMutex(l, "bench-lock"), Waiter: fencetest.LockerMutex(l, "bench-lock")},
		)
	})
}
