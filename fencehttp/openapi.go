package fencehttp

import (
	"bytes"
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument is the OpenAPI 3.1 document of the API, checked against the real
// server by openapi_test.go: every route, status, header and error code it answers.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.1 document (JSON) of the HTTP API v1 that a Server
// serves on GET /v1/openapi.json. It returns a new copy on each call.
func OpenAPI() []byte { return bytes.Clone(openAPIDocument) }

// handleOpenAPI serves GET and HEAD /v1/openapi.json.
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.WriteHeader(http.StatusOK)
	s.m.requests.WithLabelValues(routeOf(r), "200").Inc()
	if r.Method != http.MethodHead {
		_, _ = w.Write(openAPIDocument)
	}
}
