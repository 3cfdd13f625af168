package fencehttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// TestServer_Acquire_BodyOfUnknownLength_Read: a request built in process with
// a body of unknown length (ContentLength 0, as http.NewRequest leaves it for a
// reader it does not know) is read to its end, as a chunked body is, not taken
// for an empty one.
func TestServer_Acquire_BodyOfUnknownLength_Read(t *testing.T) {
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		length int64
	}{{"unknown-length-0", 0}, {"chunked", -1}} {
		body := io.MultiReader(strings.NewReader(`{"ttl_ms":`), strings.NewReader(`1234}`))
		r, err := http.NewRequest(http.MethodPost, "/v1/locks/"+tc.name+"/acquire", body)
		if err != nil {
			t.Fatal(err)
		}
		r.RequestURI, r.ContentLength = r.URL.RequestURI(), tc.length
		w := newRecorder()
		s.Handler().ServeHTTP(w, r)
		a := w.answer(t)
		if a.status != http.StatusOK || a.json["ttl_ms"] != float64(1234) {
			t.Errorf("%s: want 200 with ttl_ms 1234 (the body's), got %d %s", tc.name, a.status, a.raw)
		}
	}
}
