package fencehttp_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// listedNames returns the names of a GET /v1/locks answer, in its order.
func listedNames(t *testing.T, a answer) []string {
	t.Helper()
	locks, ok := a.json["locks"].([]any)
	if a.status != 200 || !ok {
		t.Fatalf("listing: want 200 with a locks array, got %d %s", a.status, a.raw)
	}
	names := []string{}
	for _, l := range locks {
		names = append(names, l.(map[string]any)["name"].(string))
	}
	return names
}

// Item: GET /v1/locks lists the held locks by default (limit counts them, however
// many free names sort first), all=true every name the store knows; all=false is
// the default and any other value is 400 naming the parameter "all".
func TestServer_List_HeldByDefault_AllTrueListsFree(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	for _, n := range []string{"jobs/0a", "jobs/0b"} {
		if err := mustAcquire(t, c, n, time.Minute).Release(ctxFor(t)); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, c, "jobs/1a", time.Minute)
	mustAcquire(t, c, "jobs/1b", time.Minute)
	held, all := []string{"jobs/1a", "jobs/1b"}, []string{"jobs/0a", "jobs/0b", "jobs/1a", "jobs/1b"}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"?prefix=jobs", held},
		{"?prefix=jobs&all=false", held},
		{"?prefix=jobs&limit=1", held[:1]},
		{"?prefix=jobs&all=true", all},
		{"?prefix=jobs&all=true&limit=1", all[:1]},
		{"?prefix=jobs%2F0", []string{}},
	} {
		if got := listedNames(t, call(t, "GET", hs.URL+"/v1/locks"+tc.query, "", nil)); !slices.Equal(got, tc.want) {
			t.Errorf("GET /v1/locks%s: want %q, got %q", tc.query, tc.want, got)
		}
	}

	for _, bad := range []string{"yes", "1", "TRUE", "true%20"} {
		a := call(t, "GET", hs.URL+"/v1/locks?all="+bad, "", nil)
		wantError(t, "GET /v1/locks?all="+bad, a, 400, "invalid")
		if msg, _ := a.json["error"].(string); a.json["field"] != "all" || !strings.Contains(msg, "all") {
			t.Errorf("GET /v1/locks?all=%s: want the error to name the parameter all, got %s", bad, a.raw)
		}
	}

	// The Go client asks for all=true with ListOptions.All.
	for _, tc := range []struct {
		opts fence.ListOptions
		want []string
	}{
		{fence.ListOptions{Prefix: "jobs"}, held},
		{fence.ListOptions{Prefix: "jobs", Limit: 1}, held[:1]},
		{fence.ListOptions{Prefix: "jobs", All: true}, all},
		{fence.ListOptions{Prefix: "jobs", All: true, Limit: 3}, all[:3]},
	} {
		infos, err := c.List(ctxFor(t), tc.opts)
		var got []string
		for _, i := range infos {
			got = append(got, i.Name)
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Client.List(%+v) = %q, %v; want %q", tc.opts, got, err, tc.want)
		}
	}
}

// Item: the listing shows every holder of a semaphore with its owner, as the
// dashboard reads it.
func TestServer_List_SemaphoreEveryHolderWithOwner(t *testing.T) {
	_, hs := newServer(t, fencehttp.Config{})
	c := mustClient(t, hs.URL, nil)
	mustAcquire(t, c, "pool", time.Minute, fence.WithLimit(3), fence.WithOwner("worker-a"))
	mustAcquire(t, c, "pool", time.Minute, fence.WithLimit(3), fence.WithOwner("worker-b"))
	a := call(t, "GET", hs.URL+"/v1/locks", "", nil)
	if got := listedNames(t, a); !slices.Equal(got, []string{"pool"}) {
		t.Fatalf("listing: want just pool, got %q", got)
	}
	lock := a.json["locks"].([]any)[0].(map[string]any)
	holders, _ := lock["holders"].([]any)
	var owners []string
	for _, h := range holders {
		owners = append(owners, h.(map[string]any)["owner"].(string))
	}
	if lock["limit"] != 3.0 || !slices.Equal(owners, []string{"worker-a", "worker-b"}) {
		t.Fatalf("listing of a semaphore with two holders: want limit 3 and holders worker-a, worker-b, got %s", a.raw)
	}
}
