package etcd_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
)

// A held-only List reads counter pages until it has Limit held locks: with pages
// of two names and five free names first, it still finds the held ones after
// them, and stops at the limit.
func TestLocker_List_HeldOnly_ReadsPagesPastFreeNames(t *testing.T) {
	defer etcd.SetListPageMinForTest(2)()
	ctx, cli, p := setup(t, "pages")
	l := etcd.NewLocker(cli, nil)
	for _, n := range []string{"-0a", "-0b", "-0c", "-0d", "-0e"} {
		if err := mustAcquire(t, ctx, l, p+n, time.Minute).Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := []string{p + "-1a", p + "-1b", p + "-1c"}
	for _, n := range held {
		lease := mustAcquire(t, ctx, l, n, time.Minute)
		t.Cleanup(func() { _ = lease.Release(testCtx(t)) })
	}
	names := func(opts fence.ListOptions) []string {
		t.Helper()
		list, err := l.List(ctx, opts)
		if err != nil {
			t.Fatalf("List(%+v) = %v", opts, err)
		}
		var out []string
		for _, i := range list {
			if !opts.All && !i.Held {
				t.Fatalf("List(%+v) has %+v, not held", opts, i)
			}
			out = append(out, i.Name)
		}
		return out
	}
	for _, tc := range []struct {
		opts fence.ListOptions
		want []string
	}{
		{fence.ListOptions{Prefix: p}, held},
		{fence.ListOptions{Prefix: p, Limit: 1}, held[:1]},
		{fence.ListOptions{Prefix: p, Limit: 2}, held[:2]},
		{fence.ListOptions{Prefix: p, All: true, Limit: 6}, []string{p + "-0a", p + "-0b", p + "-0c", p + "-0d", p + "-0e", p + "-1a"}},
	} {
		if got := names(tc.opts); !slices.Equal(got, tc.want) {
			t.Errorf("List(%+v) = %q; want %q", tc.opts, got, tc.want)
		}
	}
}
