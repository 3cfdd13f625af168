package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// The claim (driver.UnclaimedReleaser): a retry claims the grant it returns in
// the store operation that finds it, and the attempt that lost its answer ends
// the grant only if nobody claimed it, so a grant nobody will ever learn of
// frees its name at once and one a retry returned stays its holder's.

// lateClaimer is lateAnswer over a store that keeps request ids and records
// their claims, which it passes on, as a network store whose answers come late.
type lateClaimer struct {
	lateAnswer
	store fence.Locker
}

func (s lateClaimer) FindRetried(ctx context.Context, name string, ttl time.Duration, opts ...fence.AcquireOption) (driver.Grant, bool, error) {
	return s.store.(driver.RetryFinder).FindRetried(ctx, name, ttl, opts...)
}

func (s lateClaimer) ReleaseUnclaimed(ctx context.Context, name, leaseID, requestID string) (bool, error) {
	return s.store.(driver.UnclaimedReleaser).ReleaseUnclaimed(ctx, name, leaseID, requestID)
}

// lateClaimServer starts a server over lateClaimer on store (see lateServer).
func lateClaimServer(t *testing.T, store fence.Locker, answer <-chan struct{}) (string, <-chan struct{}) {
	t.Helper()
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: lateClaimer{lateAnswer{store, answer}, store}, KV: inmem.NewGuard()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 16)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Handler().ServeHTTP(w, r)
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			done <- struct{}{}
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL, done
}

// waitHandled waits, at most 10 s, for the late server to finish an acquire.
func waitHandled(t *testing.T, handled <-chan struct{}) {
	t.Helper()
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the late server never finished its acquire")
	}
}

// A grant with a request id whose client went away before the answer (a
// killed process, curl with a request id, an older client that never abandons)
// and that no retry claimed is released by the server at once, on a store
// that records claims: the next acquirer is granted without waiting its TTL.
func TestServer_GrantWhoseClientWentAway_Unclaimed_FreedAtOnce(t *testing.T) {
	for _, tc := range grantStores {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.open(t)
			answer := make(chan struct{})
			lateURL, handled := lateClaimServer(t, store, answer)
			name := uniq(t, "gone")
			hc := &http.Client{Timeout: 300 * time.Millisecond}
			body := fmt.Sprintf(`{"ttl_ms":20000,"request_id":"gone-%s"}`, name)
			resp, err := hc.Post(lateURL+"/v1/locks/"+fencehttp.EscapeName(name)+"/acquire", "application/json", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
				t.Fatalf("acquire through a server that answers late = %d; want the client's timeout", resp.StatusCode)
			}
			waitHeld(t, store.(fence.Inspector), name)
			close(answer)
			waitHandled(t, handled)
			_, b := newServer(t, fencehttp.Config{Locker: store})
			next, err := mustClient(t, b.URL, nil).Acquire(ctxFor(t), name, 10*time.Second)
			if err != nil {
				t.Fatalf("Acquire after the late server finished = %v; want a grant at once: the unclaimed grant was left to expire", err)
			}
			if err := next.Release(ctxFor(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// As TestServer_GrantWhoseClientWentAway_RetriedElsewhere_StaysHeld, on a store
// that records claims: the retry on the second server claims the grant, so the
// late server's conditional release touches nothing.
func TestServer_GrantWhoseClientWentAway_ClaimedByRetry_StaysHeld(t *testing.T) {
	for _, tc := range grantStores {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.open(t)
			answer := make(chan struct{})
			lateURL, handled := lateClaimServer(t, store, answer)
			_, b := newServer(t, fencehttp.Config{Locker: store})
			c := mustClient(t, lateURL+","+b.URL, &fencehttp.ClientOptions{AttemptTimeout: 300 * time.Millisecond})
			name := uniq(t, "claimed")
			lease, err := c.Acquire(ctxFor(t), name, 10*time.Second)
			if err != nil {
				t.Fatalf("Acquire through a server that answers late = %v; want the grant through the next server", err)
			}
			close(answer)
			waitHandled(t, handled)
			if err := lease.Renew(ctxFor(t), 10*time.Second); err != nil {
				t.Fatalf("Renew of the retried grant after the late server finished = %v; want nil: the claimed grant was ended under its holder", err)
			}
			if l2, err := mustClient(t, b.URL, nil).Acquire(ctxFor(t), name, 10*time.Second); !errors.Is(err, fence.ErrNotAcquired) {
				t.Fatalf("another client's Acquire = %v, %v; want fence.ErrNotAcquired while token %d is held", l2, err, lease.Token())
			}
			if err := lease.Release(ctxFor(t)); err != nil {
				t.Fatalf("Release = %v; want nil", err)
			}
		})
	}
}

// The claim and the conditional release, in each order and concurrently, on
// each store that keeps request ids: a claimed grant is never released, and
// one released before its claim is never returned to the retry (which grants
// afresh). A lock, a semaphore permit and a shared lease alike.
func TestStore_ReleaseUnclaimed_SerializedWithTheClaim(t *testing.T) {
	kinds := []struct {
		name string
		opts []fence.AcquireOption
	}{
		{"lock", nil},
		{"semaphore", []fence.AcquireOption{fence.WithLimit(2)}},
		{"shared", []fence.AcquireOption{fence.WithShared()}},
	}
	for _, tc := range grantStores {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.open(t)
			ur := store.(driver.UnclaimedReleaser)
			ctx := ctxFor(t)
			for _, k := range kinds {
				opts := func(rid string) []fence.AcquireOption {
					return append([]fence.AcquireOption{fence.WithRequestID(rid)}, k.opts...)
				}
				t.Run(k.name+"/claim-first", func(t *testing.T) {
					name, rid := uniq(t, "claim"), "claim-first-"+k.name
					first := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					retry := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					if retry.ID() != first.ID() {
						t.Fatalf("the retry got lease %s; want the first attempt's %s", retry.ID(), first.ID())
					}
					if ok, err := ur.ReleaseUnclaimed(ctx, name, first.ID(), rid); ok || err != nil {
						t.Fatalf("ReleaseUnclaimed of a claimed grant = %v, %v; want false, nil", ok, err)
					}
					if err := retry.Renew(ctx, 10*time.Second); err != nil {
						t.Fatalf("Renew of the claimed grant = %v; want nil", err)
					}
					if err := retry.Release(ctx); err != nil {
						t.Fatal(err)
					}
				})
				t.Run(k.name+"/claim-then-renew-to-another-ttl", func(t *testing.T) {
					// etcd moves a lease renewed to a TTL far from its own to a
					// new etcd lease: the claim must go along with the grant.
					name, rid := uniq(t, "claimmove"), "claim-move-"+k.name
					first := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					retry := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					if retry.ID() != first.ID() {
						t.Fatalf("the retry got lease %s; want the first attempt's %s", retry.ID(), first.ID())
					}
					if err := retry.Renew(ctx, 30*time.Second); err != nil {
						t.Fatalf("Renew of the claimed grant to 30s = %v; want nil", err)
					}
					if ok, err := ur.ReleaseUnclaimed(ctx, name, first.ID(), rid); ok || err != nil {
						t.Fatalf("ReleaseUnclaimed of a claimed grant renewed to another TTL = %v, %v; want false, nil", ok, err)
					}
					if err := retry.Renew(ctx, 10*time.Second); err != nil {
						t.Fatalf("Renew of the claimed grant after the refused release = %v; want nil", err)
					}
					if err := retry.Release(ctx); err != nil {
						t.Fatal(err)
					}
				})
				t.Run(k.name+"/claim-races-a-renew-to-another-ttl", func(t *testing.T) {
					// A claim and a Renew that moves the grant to another etcd
					// lease, at once: however they interleave, the claim holds.
					for i := range 10 {
						name, rid := uniq(t, "claimrace"), fmt.Sprintf("claim-race-%s-%d", k.name, i)
						ttl := 10 * time.Second
						if i%2 == 1 {
							ttl = 30 * time.Second
						}
						first := mustAcquire(t, store, name, ttl, opts(rid)...)
						var (
							wg         sync.WaitGroup
							renewErr   error
							g          driver.Grant
							found      bool
							findErr    error
							renewedTTL = 40*time.Second - ttl // 30s from 10s, 10s from 30s: both move
						)
						wg.Add(2)
						go func() { defer wg.Done(); renewErr = first.Renew(ctx, renewedTTL) }()
						go func() {
							defer wg.Done()
							g, found, findErr = store.(driver.RetryFinder).FindRetried(ctx, name, ttl, opts(rid)...)
						}()
						wg.Wait()
						if renewErr != nil || findErr != nil || !found || g.ID != first.ID() {
							t.Fatalf("round %d: Renew = %v; FindRetried = %v, %v, %v; want nil, and the grant %s found", i, renewErr, g.ID, found, findErr, first.ID())
						}
						if ok, err := ur.ReleaseUnclaimed(ctx, name, first.ID(), rid); ok || err != nil {
							t.Fatalf("round %d: ReleaseUnclaimed of a claimed grant = %v, %v; want false, nil", i, ok, err)
						}
						if err := first.Release(ctx); err != nil {
							t.Fatalf("round %d: Release of the claimed grant = %v; want nil", i, err)
						}
					}
				})
				t.Run(k.name+"/find-claims", func(t *testing.T) {
					name, rid := uniq(t, "find"), "find-claims-"+k.name
					first := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					g, found, err := store.(driver.RetryFinder).FindRetried(ctx, name, 10*time.Second, opts(rid)...)
					if err != nil || !found || g.ID != first.ID() {
						t.Fatalf("FindRetried = %v, %v, %v; want the grant %s", g.ID, found, err, first.ID())
					}
					if ok, err := ur.ReleaseUnclaimed(ctx, name, first.ID(), rid); ok || err != nil {
						t.Fatalf("ReleaseUnclaimed of a grant FindRetried returned = %v, %v; want false, nil", ok, err)
					}
					if err := first.Release(ctx); err != nil {
						t.Fatalf("Release of the found grant = %v; want nil", err)
					}
				})
				t.Run(k.name+"/release-first", func(t *testing.T) {
					name, rid := uniq(t, "release"), "release-first-"+k.name
					first := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					if ok, err := ur.ReleaseUnclaimed(ctx, name, first.ID(), "another-request"); ok || err != nil {
						t.Fatalf("ReleaseUnclaimed under another request id = %v, %v; want false, nil", ok, err)
					}
					if ok, err := ur.ReleaseUnclaimed(ctx, name, first.ID(), rid); !ok || err != nil {
						t.Fatalf("ReleaseUnclaimed of an unclaimed grant = %v, %v; want true, nil", ok, err)
					}
					if _, found, err := store.(driver.RetryFinder).FindRetried(ctx, name, 10*time.Second, opts(rid)...); found || err != nil {
						t.Fatalf("FindRetried after the release = %v, %v; want nothing", found, err)
					}
					retry := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
					if retry.ID() == first.ID() || retry.Token() <= first.Token() {
						t.Fatalf("the retry after the release got lease %s token %d; want a fresh grant above token %d", retry.ID(), retry.Token(), first.Token())
					}
					if err := first.Renew(ctx, 10*time.Second); !errors.Is(err, fence.ErrNotHeld) {
						t.Fatalf("Renew of the released grant = %v; want fence.ErrNotHeld", err)
					}
					if err := retry.Release(ctx); err != nil {
						t.Fatal(err)
					}
				})
				t.Run(k.name+"/race", func(t *testing.T) {
					for i := range 10 {
						name, rid := uniq(t, "race"), fmt.Sprintf("race-%s-%d", k.name, i)
						first := mustAcquire(t, store, name, 10*time.Second, opts(rid)...)
						var (
							wg       sync.WaitGroup
							released bool
							rerr     error
							retry    *fence.Lease
							aerr     error
						)
						wg.Add(2)
						go func() {
							defer wg.Done()
							released, rerr = ur.ReleaseUnclaimed(ctx, name, first.ID(), rid)
						}()
						go func() {
							defer wg.Done()
							retry, aerr = store.Acquire(ctx, name, 10*time.Second, opts(rid)...)
						}()
						wg.Wait()
						if rerr != nil || aerr != nil {
							t.Fatalf("round %d: ReleaseUnclaimed = %v, retry's Acquire = %v; want no errors", i, rerr, aerr)
						}
						switch {
						case released && retry.ID() == first.ID():
							t.Fatalf("round %d: the grant was released and returned to the retry", i)
						case !released && retry.ID() != first.ID():
							t.Fatalf("round %d: the grant stayed, and the retry got another (%s)", i, retry.ID())
						}
						if err := retry.Renew(ctx, 10*time.Second); err != nil {
							t.Fatalf("round %d (released %v): Renew of the retry's grant = %v; want nil", i, released, err)
						}
						if err := retry.Release(ctx); err != nil {
							t.Fatal(err)
						}
					}
				})
			}
		})
	}
}
