package fencehttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// A service becomes a fenced resource by wrapping its write handler: a write
// carrying an older token than one already admitted is refused with 409.
func ExampleFenced() {
	store := map[string]string{} // the resource; Fenced runs its writes one at a time
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		store[r.URL.Path] = string(body)
	})
	srv := httptest.NewServer(fencehttp.Fenced(inmem.NewGuard(), write, nil))
	defer srv.Close()

	put := func(value string, f fence.Fence) {
		req, _ := http.NewRequest("PUT", srv.URL+"/inventory", strings.NewReader(value))
		fencehttp.SetHeaders(req, f)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		fmt.Println(strings.TrimSpace(fmt.Sprint(resp.StatusCode, " ", string(answer))))
	}
	put("B's snapshot", fence.Fence{Name: "inventory", Token: 2, LeaseID: "lease-b"})
	put("A's stale snapshot", fence.Fence{Name: "inventory", Token: 1, LeaseID: "lease-a"})
	fmt.Println(store["/inventory"])
	// Output:
	// 200
	// 409 {"error":"put \"/inventory\": stale token 1, highest seen 2","code":"stale_token","key":"/inventory","highest":2,"token":1}
	// B's snapshot
}
