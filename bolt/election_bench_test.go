package bolt

import (
	"path/filepath"
	"testing"

	"github.com/fencelock/fence/fencetest"
)

// The handoff after a leader resigns on a durable store (default options),
// interleaved round by round with a lock's handoff after a release on the same
// store, so their ratio (the target: within 2x) is read off one run:
//
//	go test -run '^$' -bench ResignHandoff -benchtime 200x ./bolt/
func BenchmarkResignHandoff(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "fence.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	b.Run("election", func(b *testing.B) { fencetest.BenchmarkResignHandoff(b, s, s) })
	b.Run("vs-lock", func(b *testing.B) {
		fencetest.BenchmarkHandoffInterleaved(b,
			fencetest.HandoffSubject{Name: "election", Holder: fencetest.ElectionMutex(s, "bench-election"), Waiter: fencetest.ElectionMutex(s, "bench-election")},
			fencetest.HandoffSubject{Name: "lock", Holder: fencetest.LockerMutex(s, "bench-lock"), Waiter: fencetest.LockerMutex(s, "bench-lock")},
		)
	})
}
