package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencelock/fence/idempotency"
	"github.com/fencelock/fence/idempotency/boltstore"
)

// A worker holding the lock on a batch calls a payment API that cannot check
// fencing tokens. It derives the key from the work item, so a paused predecessor
// that retries the same line sends the same key, and the API charges once.
func ExampleKey() {
	batch, line := "settlement-2026-11-29", "17"
	key := idempotency.Key(batch, line) // never the fencing token
	req, _ := http.NewRequest("POST", "https://payments.example/charges", strings.NewReader(`{"amount":100}`))
	req.Header.Set(idempotency.HeaderKey, key)
	fmt.Println(key == idempotency.Key("settlement-2026-11-29", "17"))
	// Output: true
}

func ExampleMiddleware() {
	dir, _ := os.MkdirTemp("", "idem")
	defer os.RemoveAll(dir)
	store, err := boltstore.Open(filepath.Join(dir, "keys.db"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	charges := 0
	api := idempotency.Middleware(store, idempotency.Options{Required: true})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", charges)
	}))
	send := func(key, body string) {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
		if key != "" {
			r.Header.Set(idempotency.HeaderKey, key)
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get(idempotency.HeaderReplayed), strings.TrimSpace(w.Body.String()))
	}
	send("line-17", "100 EUR") // runs
	send("line-17", "100 EUR") // replayed
	send("line-17", "999 EUR") // same key, other payload
	send("", "100 EUR")        // no key
	// Output:
	// 201  charge 1
	// 201 true charge 1
	// 422  {"error":"this Idempotency-Key was used for a different request payload","code":"idempotency_key_reused"}
	// 400  {"error":"the Idempotency-Key header is required for POST requests","code":"idempotency_key_missing"}
}
