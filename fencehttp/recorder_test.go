package fencehttp_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

type recorder struct{ *httptest.ResponseRecorder }

func newRecorder() recorder { return recorder{httptest.NewRecorder()} }

func (r recorder) answer(t testing.TB) answer {
	t.Helper()
	a := answer{status: r.Code, header: r.Header(), raw: r.Body.String()}
	if strings.HasPrefix(r.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(r.Body.Bytes(), &a.json); err != nil {
			t.Fatalf("answer is not JSON: %v: %q", err, a.raw)
		}
	}
	return a
}
