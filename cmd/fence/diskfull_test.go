package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/diskfulltest"
)

// TestServe_DiskFull_503UntilFreed_AcknowledgedSurviveKill9 runs `fence serve`
// with its data on a 2 MiB tmpfs of its own and fills it while clients grant,
// renew, release and write KV over HTTP: the server answers 503 saying the disk
// is full, acknowledges nothing it could not write, serves again once the filler
// is removed (no restart), and after kill -9 and a restart every acknowledged
// operation is there.
func TestServe_DiskFull_503UntilFreed_AcknowledgedSurviveKill9(t *testing.T) {
	vol := diskfulltest.Volume(t)
	p, err := startServe(vol.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill() })
	client := func(url string) *fencehttp.Client {
		c, err := fencehttp.NewClient(url, &fencehttp.ClientOptions{RequestTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// The answer itself: 503, code "unavailable", a message saying the disk is full.
	lease := acquireJSON(t, p.url, "diskfull-raw")
	if _, err := vol.Fill(); err != nil {
		t.Fatal(err)
	}
	status, body := 0, ""
	for i := 0; i < 1000; i++ { // a few writes still fit in pages already allocated
		req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v1/kv/diskfull-raw/%d", p.url, i), strings.NewReader(strings.Repeat("x", 4000)))
		req.Header.Set("Fence-Token", fmt.Sprint(lease.Token))
		req.Header.Set("Fence-Lock", "diskfull-raw")
		req.Header.Set("Fence-Lease", lease.Lease)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if status, body = resp.StatusCode, string(b); status != http.StatusOK {
			break
		}
	}
	var e struct{ Error, Code string }
	_ = json.Unmarshal([]byte(body), &e)
	if status != http.StatusServiceUnavailable || e.Code != "unavailable" || !strings.Contains(e.Error, "disk full (no space left on device)") {
		t.Errorf("PUT on a full disk: want 503 unavailable saying the disk is full, got %d %s", status, body)
	}
	t.Logf("PUT on a full disk: %d %s", status, strings.TrimSpace(body))
	if err := vol.Free(); err != nil {
		t.Fatal(err)
	}

	h := diskfulltest.Run(t, client(p.url), vol, 4)
	p.kill()
	p2, err := startServe(vol.Dir)
	if err != nil {
		t.Fatalf("restart after kill -9: %v", err)
	}
	t.Cleanup(func() { p2.kill() })
	h.Verify(t, client(p2.url))
}
