package fencehttp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// BenchmarkServer_AcquireRelease: one acquire+release pair over HTTP on the
// in-memory store (no fsync to hide the server's own cost), with the store granting
// without a lease handle (driver.Granter) and, behind lockerOnly, with a
// *fence.Lease per grant.
func BenchmarkServer_AcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name   string
		locker func() fence.Locker
	}{
		{"grant=driver.Grant", func() fence.Locker { return inmem.NewLocker(inmem.Options{}) }},
		{"grant=fence.Lease", func() fence.Locker { return lockerOnly{inmem.NewLocker(inmem.Options{})} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, hs := newServer(b, fencehttp.Config{Locker: tc.locker()})
			c := mustClient(b, hs.URL, nil)
			ctx := context.Background()
			name := fmt.Sprintf("bench/%s", tc.name)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l, err := c.Acquire(ctx, name, 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
