package fencehttp_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// The OpenAPI document (fencehttp/openapi.json, served on GET /v1/openapi.json) is
// checked here against real servers, with kin-openapi's validator: every request
// the test sends is validated against the document (a request the server refuses
// with 400 must be one the document refuses too, where a schema can say it), and
// every answer (status, headers, body) against the operation's response. The test
// fails when the document has an operation, status or error code no exchange
// produced (coverage), and when the server answers a method and path the document
// does not have (probe), so the document cannot drift from the server.

// loadOpenAPI parses and validates an OpenAPI document and makes its router.
func loadOpenAPI(data []byte) (*openapi3.T, routers.Router, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, nil, fmt.Errorf("load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, nil, fmt.Errorf("validate: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, nil, fmt.Errorf("openapi %q: want 3.1", doc.OpenAPI)
	}
	// servers names fence serve's default address; the servers under test listen on
	// other ports, and the router would match only the document's host and port.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("router: %w", err)
	}
	return doc, router, nil
}

// target is a server under test, as a client sees it.
type target struct {
	url   string
	auth  bool   // the server has auth tokens
	token string // the bearer token this client sends ("" none)
}

// startTarget starts a server over cfg as it is (no defaults filled in) on a real
// listener on 127.0.0.1.
func startTarget(t *testing.T, cfg fencehttp.Config) (*fencehttp.Server, *target) {
	t.Helper()
	s, err := fencehttp.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, &target{url: hs.URL, auth: len(cfg.AuthTokens) > 0}
}

// reqCheck is what the document must say of an exchange's request.
type reqCheck int

const (
	reqConforms  reqCheck = iota // the request must validate
	reqViolates                  // the request must not validate (the server refuses it: 400 or 401)
	reqUnchecked                 // the document cannot say (body size, control characters in an escaped segment)
)

// exchange is one request and the answer it must get.
type exchange struct {
	what         string
	on           *target
	method, path string // path as sent, escaped
	header       map[string]string
	body         string
	req          reqCheck
	// global names the component response that describes the answer of a request
	// no operation has (an unknown path, a method a path lacks, a dot segment) or
	// that any operation may get (a store's panic): components.responses.<global>.
	global string
	// route, if set, is the path the document describes the exchange under (an
	// alias the server also answers: /ui/ for /ui).
	route  string
	status int
	code   string // the error code; "" for a success
}

// exchanged is the answer to an exchange.
type exchanged struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

type covKey struct {
	op     string // operationId, or "global <response>"
	status int    // 0 for globals
	code   string
}

func (k covKey) String() string {
	s := k.op
	if k.status != 0 {
		s += " " + strconv.Itoa(k.status)
	}
	if k.code != "" {
		s += " " + k.code
	}
	return s
}

// checker sends exchanges, validates them against doc and records coverage. It
// collects failures (rather than failing t) so that a test can show that a
// drifted document is caught.
type checker struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	client *http.Client

	mu       sync.Mutex
	seen     map[covKey]bool
	failures []string
}

// findRoute finds the operation of req, or of req at the path alias if it is set.
func (c *checker) findRoute(req *http.Request, alias string) (*routers.Route, map[string]string, error) {
	if alias == "" {
		return c.router.FindRoute(req)
	}
	r := req.Clone(req.Context())
	r.URL.Path, r.URL.RawPath = alias, ""
	return c.router.FindRoute(r)
}

// aliases are paths the server answers as another documented path: the document
// says so in that operation's description rather than listing them (a path with a
// trailing slash is a lint error).
var aliases = map[string]string{"/ui/": "/ui", "/v1/locks/": "/v1/locks"}

// commonResponses are the component responses every operation refers to (405 for
// the path's other methods, 500 for a bug): they are covered once, as the global
// answers they are, not per operation.
var commonResponses = map[string]bool{"MethodNotAllowed": true, "Internal": true}

// The dashboard's files are text the validator has no decoder for: they are checked
// as opaque strings (their content is the dashboard's own tests' concern).
func init() {
	for _, ct := range []string{"text/html", "text/css", "text/javascript", "image/svg+xml", "application/octet-stream"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.FileBodyDecoder)
	}
}

func newChecker(t *testing.T, data []byte) *checker {
	t.Helper()
	doc, router, err := loadOpenAPI(data)
	if err != nil {
		t.Fatalf("the OpenAPI document: %v", err)
	}
	return &checker{t: t, doc: doc, router: router, seen: map[covKey]bool{},
		client: &http.Client{
			Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse // the server never redirects: see it if it does
			},
		}}
}

func (c *checker) failf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

// report fails t with every failure collected.
func (c *checker) report() {
	c.t.Helper()
	for _, f := range c.failures {
		c.t.Error(f)
	}
}

func (c *checker) authFunc(on *target) openapi3filter.AuthenticationFunc {
	return func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		if !on.auth {
			return nil // a server without auth tokens needs none
		}
		scheme, tok, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return in.NewError(fmt.Errorf("no bearer token"))
		}
		return nil
	}
}

// newRequest returns the request of x, or nil (a failure) if it cannot be made.
// It and send record failures instead of stopping the test, so that an exchange
// can run in a goroutine of its own.
func (c *checker) newRequest(x exchange) *http.Request {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	c.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, x.method, x.on.url+x.path, strings.NewReader(x.body))
	if err != nil {
		c.failf("%s: NewRequest %s %s: %v", x.what, x.method, x.path, err)
		return nil
	}
	if x.body != "" && x.header["Content-Type"] == "" {
		ct := "application/json"
		if strings.HasPrefix(x.path, "/v1/kv/") {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	for k, v := range x.header {
		req.Header.Set(k, v)
	}
	if x.on.token != "" {
		req.Header.Set("Authorization", "Bearer "+x.on.token)
	}
	return req
}

// globalRoute is a route whose only operation answers with the component
// response name, for answers no operation of the document describes.
func (c *checker) globalRoute(req *http.Request, name string) *routers.Route {
	ref := c.doc.Components.Responses[name]
	if ref == nil {
		c.failf("components.responses.%s: not in the document", name)
		return nil
	}
	op := openapi3.NewOperation()
	op.Responses = openapi3.NewResponses()
	op.Responses.Delete("default")
	status := 0
	switch name {
	case "BadPath":
		status = 400
	case "NotFound":
		status = 404
	case "MethodNotAllowed":
		status = 405
	case "Internal":
		status = 500
	default:
		c.failf("components.responses.%s: the test knows no status for this global answer", name)
		return nil
	}
	op.Responses.Set(strconv.Itoa(status), ref)
	return &routers.Route{Spec: c.doc, Path: req.URL.Path, Method: req.Method, Operation: op}
}

// do sends x, validates request and answer against the document, checks the
// status and code x wants, and records what it covered.
func (c *checker) do(x exchange) exchanged {
	req := c.newRequest(x)
	if req == nil {
		return exchanged{}
	}
	route, params, rerr := c.findRoute(req, x.route)
	var op string
	switch {
	case x.global != "":
		if rerr == nil && x.global != "Internal" {
			c.failf("%s: %s %s is the document's %s, but the exchange says no operation describes it",
				x.what, x.method, x.path, route.Operation.OperationID)
		}
		route, params, op = c.globalRoute(req, x.global), nil, "global "+x.global
		if route == nil {
			return exchanged{}
		}
	case rerr != nil:
		c.failf("%s: %s %s: the document has no operation for it: %v", x.what, x.method, x.path, rerr)
		return exchanged{}
	default:
		op = route.Operation.OperationID
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: c.authFunc(x.on), MultiError: true}}
	if x.global == "" && x.req != reqUnchecked {
		err := openapi3filter.ValidateRequest(req.Context(), in)
		switch {
		case x.req == reqConforms && err != nil:
			c.failf("%s: request %s %s does not conform to the document: %v", x.what, x.method, x.path, err)
		case x.req == reqViolates && err == nil:
			c.failf("%s: request %s %s is refused by the server but the document allows it", x.what, x.method, x.path)
		}
	}
	// ValidateRequest read the body; send it again from the start.
	req.Body, req.GetBody = io.NopCloser(strings.NewReader(x.body)), nil

	resp, body := c.send(req)
	if resp == nil {
		return exchanged{}
	}
	a := exchanged{status: resp.StatusCode, header: resp.Header, body: body}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && len(body) > 0 {
		_ = json.Unmarshal(body, &a.json)
	}
	code, _ := a.json["code"].(string)
	if resp.StatusCode < 400 {
		code = ""
	}

	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		c.failf("%s: %s %s answered %d %s, which the document's %s does not describe: %v",
			x.what, x.method, x.path, resp.StatusCode, bytes.TrimSpace(body), op, err)
	}
	if resp.StatusCode != x.status || code != x.code {
		c.failf("%s: %s %s: want %d %q, got %d %s", x.what, x.method, x.path, x.status, x.code, resp.StatusCode, bytes.TrimSpace(body))
	}
	key := covKey{op: op, status: resp.StatusCode, code: code}
	if x.global != "" {
		key.status = 0
	}
	c.mu.Lock()
	c.seen[key] = true
	c.mu.Unlock()
	return a
}

// codesOf returns the error codes a response schema allows by const (through
// oneOf and allOf), or nil for a schema without them.
func codesOf(s *openapi3.SchemaRef) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	var codes []string
	if p := s.Value.Properties["code"]; p != nil && p.Value != nil && p.Value.Const != nil {
		codes = append(codes, fmt.Sprint(p.Value.Const))
	}
	for _, sub := range append(slices.Clone(s.Value.OneOf), s.Value.AllOf...) {
		codes = append(codes, codesOf(sub)...)
	}
	return codes
}

// responseKeys returns the coverage keys of one response: one per error code it
// allows, or one without a code.
func responseKeys(op string, status int, r *openapi3.Response) []covKey {
	var codes []string
	if r != nil {
		if mt := r.Content.Get("application/json"); mt != nil {
			codes = codesOf(mt.Schema)
		}
	}
	if len(codes) == 0 {
		return []covKey{{op: op, status: status}}
	}
	keys := make([]covKey, 0, len(codes))
	for _, code := range codes {
		keys = append(keys, covKey{op: op, status: status, code: code})
	}
	return keys
}

// documented returns every (operation, status, code) of doc, and every code of
// the component responses no operation refers to (the global answers).
func documented(doc *openapi3.T) []covKey {
	var keys []covKey
	referenced := map[string]bool{}
	for _, path := range doc.Paths.InMatchingOrder() {
		for _, op := range doc.Paths.Value(path).Operations() {
			for st, ref := range op.Responses.Map() {
				status, err := strconv.Atoi(st)
				if err != nil {
					status = -1 // "default" or a range: never produced, so always reported
				}
				if name, ok := strings.CutPrefix(ref.Ref, "#/components/responses/"); ok {
					if commonResponses[name] {
						continue // covered as a global answer, below
					}
					referenced[name] = true
				}
				keys = append(keys, responseKeys(op.OperationID, status, ref.Value)...)
			}
		}
	}
	for name, ref := range doc.Components.Responses {
		if !referenced[name] {
			keys = append(keys, responseKeys("global "+name, 0, ref.Value)...)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	return keys
}

// uncovered returns what doc documents and seen lacks.
func uncovered(doc *openapi3.T, seen map[covKey]bool) []string {
	var missing []string
	for _, k := range documented(doc) {
		if !seen[k] {
			missing = append(missing, k.String())
		}
	}
	return missing
}

// instantiate fills a path template's parameters with a plain value.
func instantiate(path string) string {
	for _, p := range []string{"{name}", "{key}"} {
		path = strings.ReplaceAll(path, p, "p1")
	}
	return path
}

var probeMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}

// probe sends every method to the document's paths and to paths the server might
// answer (routes DESIGN.md plans, near misses of the real ones). An answer the
// server gives before it picks an operation (404 "no such route", 405, 400 for the
// path) means no operation; any other answer must be an operation of the document
// (HEAD is GET's, as the document's description says, and must answer as GET does,
// without a body); a 405 must list the path's documented methods in Allow.
// unserved drives the request of x (its method, path, header and body) into the
// answers every operation has besides its own, op naming them: 401 from the server
// with auth tokens (x sent without one), 403 from it (x sent with a token whose
// scope covers none of the names the exchanges use), 501 from the server whose store lacks the
// interface missing (none if missing is ""), and 503 from the server whose store
// is closed.
func (c *checker) unserved(s *servers, op, missing string, x exchange) {
	noToken, scoped, bare, closed := x, x, x, x
	noToken.what, noToken.on, noToken.req, noToken.status, noToken.code = op+", no token", s.auth, reqViolates, http.StatusUnauthorized, "unauthorized"
	c.do(noToken)
	scoped.what, scoped.on, scoped.status, scoped.code = op+", token out of scope", s.scoped, http.StatusForbidden, "forbidden"
	c.do(scoped)
	if missing != "" {
		bare.what, bare.on, bare.status, bare.code = op+", no "+missing, s.bare, http.StatusNotImplemented, "not_implemented"
		c.do(bare)
	}
	closed.what, closed.on, closed.status, closed.code = op+", store closed", s.closed, http.StatusServiceUnavailable, "unavailable"
	c.do(closed)
}

func (c *checker) probe(on *target) {
	c.t.Helper()
	// Not "/v1/kv/" or "/v1/fences/": they are the documented routes with an empty
	// key, refused with 400 by the handler (see the Key parameter).
	paths := []string{"/v1/locks/p1/acquire", "/v1/locks/p1/renew", "/v1/locks/p1/release",
		"/v1/locks/p1/heal", "/v1/locks/p1", "/v1/locks", "/v1/kv/p1", "/v1/fences/p1",
		"/healthz", "/metrics", "/v1/openapi.json",
		"/", "/v1", "/v1/", "/v1/kv", "/v1/fences", "/v1/locks/p1/revoke", "/v1/locks/",
		"/v1/locks/p1/watch", "/v1/locks/p1/bogus", "/ui", "/ui/", "/v1/openapi.yaml",
		"/openapi.json", "/healthz/", "/metrics/", "/readyz", "/readyz/"}
	for _, p := range c.doc.Paths.InMatchingOrder() {
		if p := instantiate(p); !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	for _, path := range paths {
		for _, method := range probeMethods {
			if (method == "GET" || method == "HEAD") && strings.HasPrefix(path, "/v1/locks/p1/") &&
				!actionWords[path[len("/v1/locks/p1/"):]] {
				// The state of the lock "p1/bogus": a name with an unescaped '/', as
				// the document's description says. An action word as the last segment
				// is that action's route for every method: GET is 405.
				continue
			}
			if method == "HEAD" {
				c.checkHead(on, path)
				continue
			}
			req := c.newRequest(exchange{method: method, path: path, on: on})
			if req == nil {
				continue
			}
			route, _, rerr := c.findRoute(req, aliases[path])
			resp, body := c.send(req)
			if resp == nil {
				continue
			}
			if path == "/" && method == "GET" {
				// The redirect to the dashboard, checked for itself.
				if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui" {
					c.failf("probe: GET /: want 302 to /ui, got %d to %q", resp.StatusCode, resp.Header.Get("Location"))
				}
				continue
			}
			var e struct{ Code, Error, Field string }
			_ = json.Unmarshal(body, &e)
			noRoute := resp.StatusCode == 404 && strings.HasPrefix(e.Error, "no such route") ||
				resp.StatusCode == 405 && e.Code == "method_not_allowed" ||
				resp.StatusCode == 400 && e.Field == "path"
			switch {
			case !noRoute && rerr != nil:
				c.failf("probe: the server answers %s %s with %d %s, but the document has no such operation",
					method, path, resp.StatusCode, bytes.TrimSpace(body))
			case noRoute && rerr == nil:
				c.failf("probe: the document has %s %s (%s), but the server answers %d %s",
					method, path, route.Operation.OperationID, resp.StatusCode, bytes.TrimSpace(body))
			}
			if resp.StatusCode == 405 {
				allow := strings.Split(resp.Header.Get("Allow"), ", ")
				if item := c.doc.Paths.Find(cmp.Or(aliases[path], path)); item != nil {
					for m := range item.Operations() {
						if !slices.Contains(allow, m) {
							c.failf("probe: %s %s: 405 with Allow %q, without the documented %s", method, path, resp.Header.Get("Allow"), m)
						}
					}
				}
			}
		}
	}
}

// send sends req and reads the whole answer; it returns a nil answer (a failure)
// if req is nil or the exchange fails.
func (c *checker) send(req *http.Request) (*http.Response, []byte) {
	if req == nil {
		return nil, nil
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.failf("%s %s: %v", req.Method, req.URL.Path, err)
		return nil, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.failf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
		return nil, nil
	}
	return resp, body
}

// checkHead checks that HEAD on path answers as GET does: the same status and
// Content-Type, no body.
func (c *checker) checkHead(on *target, path string) {
	c.t.Helper()
	head, hbody := c.send(c.newRequest(exchange{method: "HEAD", path: path, on: on}))
	get, _ := c.send(c.newRequest(exchange{method: "GET", path: path, on: on}))
	if head == nil || get == nil {
		return
	}
	if head.StatusCode != get.StatusCode || head.Header.Get("Content-Type") != get.Header.Get("Content-Type") || len(hbody) != 0 {
		c.failf("HEAD %s: want GET's %d %q without a body, got %d %q with %d bytes",
			path, get.StatusCode, get.Header.Get("Content-Type"), head.StatusCode, head.Header.Get("Content-Type"), len(hbody))
	}
}

// jsonField returns the string or integer field of a JSON answer as text.
func jsonField(t *testing.T, a exchanged, field string) string {
	t.Helper()
	switch v := a.json[field].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatUint(uint64(v), 10)
	}
	t.Fatalf("answer %s: no field %q", a.body, field)
	return ""
}

// servers are the servers the exchanges need: one per condition the document
// describes.
type servers struct {
	main      *target // embedded bolt store, small limits
	mainSrv   *fencehttp.Server
	auth      *target // with an auth token, sent without it
	authOK    *target // the same server, with the token
	bare      *target // a Locker only: no KV, Inspector, Healer or Guard
	noWatch   *target // a Locker and Inspector, no Watcher
	closed    *target // a closed bolt store
	exhausted *target // every counter at fence.MaxToken (exhaustedLocker)
	draining  *target
	drainSrv  *fencehttp.Server
	broken    *target // a store that panics
	scoped    *target // the auth server with a token that may only read the lock "nonesuch"
	// main and auth are nodes of the package's test cluster; clusterClosed is a
	// node that was closed.
	clusterClosed *target
}

func startServers(t *testing.T) *servers {
	t.Helper()
	var s servers
	live, closedNode := clusterNodes(t)
	srv, hs, _ := newBoltServer(t, fencehttp.Config{MaxBodyBytes: 256, MaxValueBytes: 16, Cluster: live})
	s.main, s.mainSrv = &target{url: hs.URL}, srv
	_, s.auth = startTarget(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), KV: inmem.NewGuard(),
		Cluster: live, AuthTokens: [][]byte{[]byte("s3cret")}, Tokens: []fencehttp.AuthToken{{Secret: []byte("scoped"), Rights: fencehttp.RightRead, Names: []string{"nonesuch"}}}})
	s.authOK = &target{url: s.auth.url, auth: true, token: "s3cret"}
	s.scoped = &target{url: s.auth.url, auth: true, token: "scoped"}
	_, s.bare = startTarget(t, fencehttp.Config{Locker: lockerOnly{inmem.NewLocker(inmem.Options{})}})
	l := inmem.NewLocker(inmem.Options{})
	_, s.noWatch = startTarget(t, fencehttp.Config{Locker: noWatch{l, l}})
	_, hs, store := newBoltServer(t, fencehttp.Config{})
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	s.closed = &target{url: hs.URL}
	_, s.exhausted = startTarget(t, fencehttp.Config{Locker: exhaustedLocker{inmem.NewLocker(inmem.Options{})}, KV: inmem.NewGuard()})
	s.drainSrv, s.draining = startTarget(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), KV: inmem.NewGuard()})
	_, s.broken = startTarget(t, fencehttp.Config{Locker: panicLocker{inmem.NewLocker(inmem.Options{})}})
	_, s.clusterClosed = startTarget(t, fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{}), Cluster: closedNode})
	return &s
}

// exercise drives every operation of the API into every status the document gives
// it, on the servers of s.
func exercise(t *testing.T, c *checker, s *servers) {
	t.Helper()
	m := s.main
	fenced := func(token, lock, lease string) map[string]string {
		h := map[string]string{}
		if token != "" {
			h["Fence-Token"] = token
		}
		if lock != "" {
			h["Fence-Lock"] = lock
		}
		if lease != "" {
			h["Fence-Lease"] = lease
		}
		return h
	}
	big := `{"ttl_ms":1000` + strings.Repeat(" ", 300) + `}`
	secret := driver.NewLeaseID()
	const nightly = "/v1/locks/jobs%2Fnightly" // the lock "jobs/nightly"

	// acquire
	a := c.do(exchange{what: "acquire", on: m, method: "POST", path: nightly + "/acquire", body: `{"ttl_ms":60000}`, status: 200})
	lease := jsonField(t, a, "lease")
	c.do(exchange{what: "acquire, empty body", on: m, method: "POST", path: "/v1/locks/defaults/acquire", status: 200})
	c.do(exchange{what: "acquire, ttl 0", on: m, method: "POST", path: "/v1/locks/x/acquire", body: `{"ttl_ms":0}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "acquire, unknown field", on: m, method: "POST", path: "/v1/locks/x/acquire", body: `{"ttl":5}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "acquire, wait_ms negative", on: m, method: "POST", path: "/v1/locks/x/acquire", body: `{"wait_ms":-1}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "acquire, dot segment as the name", on: m, method: "POST", path: "/v1/locks/../acquire", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "acquire, held after the wait", on: m, method: "POST", path: nightly + "/acquire", body: `{"wait_ms":20}`, status: 409, code: "held"})
	c.do(exchange{what: "acquire, body too large", on: m, method: "POST", path: "/v1/locks/x/acquire", body: big, req: reqUnchecked, status: 413, code: "too_large"})
	c.unserved(s, "acquire", "", exchange{method: "POST", path: "/v1/locks/x/acquire"})
	c.do(exchange{what: "acquire, counter exhausted", on: s.exhausted, method: "POST", path: "/v1/locks/x/acquire", status: 409, code: "token_exhausted"})
	c.do(exchange{what: "acquire, store panics", on: s.broken, method: "POST", path: "/v1/locks/x/acquire", global: "Internal", status: 500, code: "internal"})

	// A long poll ended by a drain: the request waits on a held lock, the server
	// drains. Drained before the poll begins, it is answered the same (the wait is
	// cancelled at once), so the order does not matter.
	c.do(exchange{what: "hold for the drain", on: s.draining, method: "POST", path: "/v1/locks/x/acquire", body: `{"ttl_ms":60000}`, status: 200})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.do(exchange{what: "acquire, server draining", on: s.draining, method: "POST", path: "/v1/locks/x/acquire", body: `{"wait_ms":20000}`, status: 503, code: "unavailable"})
	}()
	time.Sleep(20 * time.Millisecond)
	s.drainSrv.Drain()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll did not end after Drain")
	}
	c.do(exchange{what: "healthz, draining", on: s.draining, method: "GET", path: "/healthz", status: 503, code: "unavailable"})
	c.do(exchange{what: "readyz, draining", on: s.draining, method: "GET", path: "/readyz", status: 503, code: "unavailable"})

	// renew
	c.do(exchange{what: "renew", on: m, method: "POST", path: nightly + "/renew", body: `{"lease":"` + lease + `","ttl_ms":60000}`, status: 200})
	c.do(exchange{what: "renew, default ttl", on: m, method: "POST", path: nightly + "/renew", body: `{"lease":"` + lease + `"}`, status: 200})
	c.do(exchange{what: "renew, lease with a space", on: m, method: "POST", path: nightly + "/renew", body: `{"lease":"a b"}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "renew, no body", on: m, method: "POST", path: nightly + "/renew", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "renew, not held", on: m, method: "POST", path: nightly + "/renew", body: `{"lease":"` + secret + `"}`, status: 410, code: "not_held"})
	c.do(exchange{what: "renew, body too large", on: m, method: "POST", path: nightly + "/renew", body: big, req: reqUnchecked, status: 413, code: "too_large"})
	c.unserved(s, "renew", "", exchange{method: "POST", path: "/v1/locks/x/renew", body: `{"lease":"` + secret + `"}`})

	// lock state and listing
	c.do(exchange{what: "state", on: m, method: "GET", path: nightly, status: 200})
	c.do(exchange{what: "state, never acquired", on: m, method: "GET", path: "/v1/locks/never", status: 200})
	c.do(exchange{what: "state, escaped dots", on: m, method: "GET", path: "/v1/locks/%2E%2E", status: 200})
	c.do(exchange{what: "state, dot segment", on: m, method: "GET", path: "/v1/locks/..", req: reqViolates, status: 400, code: "invalid"})
	// An escaped control character: the document's patterns (RE2) cannot say it.
	c.do(exchange{what: "state, control character", on: m, method: "GET", path: "/v1/locks/a%01b", req: reqUnchecked, status: 400, code: "invalid"})
	c.unserved(s, "state", "Inspector", exchange{method: "GET", path: "/v1/locks/x"})
	// blocking queries
	c.do(exchange{what: "blocking query, index changed", on: m, method: "GET", path: nightly + "?index=1&wait_ms=30000", status: 200})
	c.do(exchange{what: "blocking query, wait over", on: m, method: "GET", path: "/v1/locks/never?index=1&wait_ms=20", status: 200})
	c.do(exchange{what: "blocking query, index not a number", on: m, method: "GET", path: "/v1/locks/never?index=x", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "blocking query, wait_ms negative", on: m, method: "GET", path: "/v1/locks/never?index=1&wait_ms=-1", req: reqViolates, status: 400, code: "invalid"})
	// A schema cannot say that wait_ms needs index.
	c.do(exchange{what: "blocking query, wait_ms without index", on: m, method: "GET", path: "/v1/locks/never?wait_ms=20", req: reqUnchecked, status: 400, code: "invalid"})
	c.do(exchange{what: "blocking query, store cannot watch", on: s.noWatch, method: "GET", path: "/v1/locks/x?index=1", status: 501, code: "not_implemented"})
	// "x" is held there with token 1 (index 2): a query that would wait ends at once.
	c.do(exchange{what: "blocking query, server draining", on: s.draining, method: "GET", path: "/v1/locks/x?index=2&wait_ms=20000", status: 503, code: "unavailable"})
	c.unserved(s, "blocking query", "Inspector", exchange{method: "GET", path: "/v1/locks/x?index=1&wait_ms=20"})
	l := c.do(exchange{what: "list", on: m, method: "GET", path: "/v1/locks?prefix=jobs&limit=10", status: 200})
	if locks, _ := l.json["locks"].([]any); len(locks) != 1 {
		c.failf("list prefix=jobs: want the one lock jobs/nightly, got %s", l.body)
	}
	c.do(exchange{what: "list, no prefix", on: m, method: "GET", path: "/v1/locks", status: 200})
	c.do(exchange{what: "list, trailing slash", on: m, method: "GET", path: "/v1/locks/", route: "/v1/locks", status: 200})
	// "defaults" was acquired with the default TTL and is held; "never" is known
	// to the store only if a read made it so: take a free name for certain.
	free := c.do(exchange{what: "acquire listed", on: m, method: "POST", path: "/v1/locks/listed/acquire", status: 200})
	c.do(exchange{what: "release listed", on: m, method: "POST", path: "/v1/locks/listed/release", body: `{"lease":"` + jsonField(t, free, "lease") + `"}`, status: 200})
	if l := c.do(exchange{what: "list, held only", on: m, method: "GET", path: "/v1/locks?prefix=listed", status: 200}); l.json != nil && len(l.json["locks"].([]any)) != 0 {
		c.failf("list prefix=listed: want no lock (listed is free), got %s", l.body)
	}
	if l := c.do(exchange{what: "list, all=true", on: m, method: "GET", path: "/v1/locks?prefix=listed&all=true", status: 200}); l.json != nil && len(l.json["locks"].([]any)) != 1 {
		c.failf("list prefix=listed all=true: want the free lock listed, got %s", l.body)
	}
	c.do(exchange{what: "list, limit not a number", on: m, method: "GET", path: "/v1/locks?limit=ten", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "list, limit too high", on: m, method: "GET", path: "/v1/locks?limit=10001", req: reqViolates, status: 400, code: "invalid"})
	c.unserved(s, "list", "Inspector", exchange{method: "GET", path: "/v1/locks"})

	// heal
	c.do(exchange{what: "heal", on: m, method: "POST", path: "/v1/locks/healed/heal", body: `{"seen":5}`, status: 200})
	c.do(exchange{what: "heal, token 0", on: m, method: "POST", path: "/v1/locks/healed/heal", body: `{"seen":0}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "heal, token above 2^53-1", on: m, method: "POST", path: "/v1/locks/healed/heal", body: fmt.Sprintf(`{"seen":%d}`, fence.MaxToken+1), req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "heal, body too large", on: m, method: "POST", path: "/v1/locks/healed/heal", body: big, req: reqUnchecked, status: 413, code: "too_large"})
	hb := c.do(exchange{what: "heal, beyond the bound", on: m, method: "POST", path: "/v1/locks/healed/heal", body: fmt.Sprintf(`{"seen":%d}`, 5+fence.MaxHealAhead+1), status: 400, code: "invalid"})
	if hb.json != nil && (hb.json["field"] != "seen" || hb.json["bound"] != float64(fence.MaxHealAhead)) {
		c.failf("heal beyond the bound: want field seen and bound %d, got %s", uint64(fence.MaxHealAhead), hb.body)
	}
	c.unserved(s, "heal", "Healer", exchange{method: "POST", path: "/v1/locks/x/heal", body: `{"seen":5}`})

	// the fenced store: the lock "report" grants A, then B.
	ra := c.do(exchange{what: "acquire report (A)", on: m, method: "POST", path: "/v1/locks/report/acquire", body: `{"ttl_ms":60000}`, status: 200})
	c.do(exchange{what: "release A", on: m, method: "POST", path: "/v1/locks/report/release", body: `{"lease":"` + jsonField(t, ra, "lease") + `"}`, status: 200})
	rb := c.do(exchange{what: "acquire report (B)", on: m, method: "POST", path: "/v1/locks/report/acquire", body: `{"ttl_ms":60000}`, status: 200})
	tokA, tokB, leaseB := jsonField(t, ra, "token"), jsonField(t, rb, "token"), jsonField(t, rb, "lease")
	ro := c.do(exchange{what: "acquire other", on: m, method: "POST", path: "/v1/locks/other/acquire", body: `{"ttl_ms":60000}`, status: 200})
	tokO, leaseO := jsonField(t, ro, "token"), jsonField(t, ro, "lease")
	c.do(exchange{what: "put", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokB, "report", leaseB), body: "balance=100", status: 200})
	c.do(exchange{what: "put, lock with a slash, empty value", on: m, method: "PUT", path: "/v1/kv/nightly%2Fout", header: fenced(jsonField(t, a, "token"), "jobs%2Fnightly", lease), status: 200})
	c.do(exchange{what: "put, no Fence-Lock", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokB, "", ""), body: "x", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "put, Fence-Token not a number", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced("x", "report", ""), body: "x", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "put, stale token", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokA, "report", ""), body: "balance=90", status: 409, code: "stale_token"})
	c.do(exchange{what: "put, live lease's token without its lease", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokB, "report", ""), body: "balance=90", status: 409, code: "lease_required"})
	// A's lease has ended: its token alone is admitted where it is above the
	// key's, and is stale (same_token) where A's lease wrote it.
	c.do(exchange{what: "put, ended lease's token", on: m, method: "PUT", path: "/v1/kv/old", header: fenced(tokA, "report", jsonField(t, ra, "lease")), body: "a", status: 200})
	c.do(exchange{what: "put, same token without its lease", on: m, method: "PUT", path: "/v1/kv/old", header: fenced(tokA, "report", ""), body: "a2", status: 409, code: "stale_token"})
	c.do(exchange{what: "put, another lock's token", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokO, "other", leaseO), body: "x", status: 409, code: "wrong_lock"})
	c.do(exchange{what: "put, token never issued", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced("999999", "report", ""), body: "x", status: 409, code: "unissued_token"})
	c.do(exchange{what: "put, lock never granted", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced("42", "never", ""), body: "x", status: 409, code: "unissued_token"})
	c.do(exchange{what: "put, another lease", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokO, "other", secret), body: "x", status: 409, code: "unissued_token"})
	c.do(exchange{what: "put, value too large", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced("999", "report", ""), body: strings.Repeat("v", 17), req: reqUnchecked, status: 413, code: "too_large"})
	c.do(exchange{what: "put, token never issued", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced("999999", "report", ""), body: "x", status: 409, code: "unissued_token"})
	c.do(exchange{what: "put, lock never granted", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced("1", "never", ""), body: "x", status: 409, code: "unissued_token"})
	c.unserved(s, "put", "KV", exchange{method: "PUT", path: "/v1/kv/ledger", header: fenced("1", "report", ""), body: "x"})

	g := c.do(exchange{what: "get", on: m, method: "GET", path: "/v1/kv/ledger", status: 200})
	if string(g.body) != "balance=100" || g.header.Get("Fence-Token") != tokB || g.header.Get("Fence-Lock") != "report" {
		c.failf("get ledger: want balance=100 with Fence-Token %s and Fence-Lock report, got %q with %v", tokB, g.body, g.header)
	}
	if g := c.do(exchange{what: "get, lock with a slash", on: m, method: "GET", path: "/v1/kv/nightly%2Fout", status: 200}); g.header.Get("Fence-Lock") != "jobs%2Fnightly" {
		c.failf("get nightly/out: want Fence-Lock jobs%%2Fnightly (escaped), got %q", g.header.Get("Fence-Lock"))
	}
	c.do(exchange{what: "get, dot segment", on: m, method: "GET", path: "/v1/kv/..", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "get, never written", on: m, method: "GET", path: "/v1/kv/never", status: 404, code: "not_found"})
	c.unserved(s, "get", "KV", exchange{method: "GET", path: "/v1/kv/ledger"})

	c.do(exchange{what: "fence", on: m, method: "POST", path: "/v1/fences/ledger", header: fenced(tokB, "report", leaseB), status: 200})
	c.do(exchange{what: "fence, no Fence-Token", on: m, method: "POST", path: "/v1/fences/ledger", header: fenced("", "report", ""), req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "fence, stale token", on: m, method: "POST", path: "/v1/fences/ledger", header: fenced(tokA, "report", ""), status: 409, code: "stale_token"})
	c.do(exchange{what: "fence, another lock's token", on: m, method: "POST", path: "/v1/fences/ledger", header: fenced(tokO, "other", leaseO), status: 409, code: "wrong_lock"})
	c.do(exchange{what: "fence, live lease's token without its lease", on: m, method: "POST", path: "/v1/fences/ledger", header: fenced(tokB, "report", ""), status: 409, code: "lease_required"})
	c.do(exchange{what: "fence, token never issued", on: m, method: "POST", path: "/v1/fences/ledger", header: fenced("999999", "report", ""), status: 409, code: "unissued_token"})
	c.unserved(s, "fence", "Guard", exchange{method: "POST", path: "/v1/fences/ledger", header: fenced("1", "report", "")})
	exerciseDelete(c, s, fenced, tokA, tokB, leaseB, tokO, leaseO)

	// delete keeps the fence; GET of a key without value is 404 with it; purge
	c.do(exchange{what: "put spent", on: m, method: "PUT", path: "/v1/kv/spent", header: fenced(tokB, "report", leaseB), body: "x", status: 200})
	c.do(exchange{what: "delete, token never issued", on: m, method: "DELETE", path: "/v1/kv/spent", header: fenced("999999", "report", ""), status: 409, code: "unissued_token"})
	c.do(exchange{what: "delete, stale token", on: m, method: "DELETE", path: "/v1/kv/spent", header: fenced(tokA, "report", ""), status: 409, code: "stale_token"})
	c.do(exchange{what: "delete, another lock's token", on: m, method: "DELETE", path: "/v1/kv/spent", header: fenced(tokO, "other", leaseO), status: 409, code: "wrong_lock"})
	c.do(exchange{what: "delete, no Fence-Lock", on: m, method: "DELETE", path: "/v1/kv/spent", header: fenced(tokB, "", ""), req: reqUnchecked, status: 400, code: "invalid"})
	c.do(exchange{what: "delete", on: m, method: "DELETE", path: "/v1/kv/spent", header: fenced(tokB, "report", leaseB), status: 200})
	c.do(exchange{what: "delete, no value", on: m, method: "DELETE", path: "/v1/kv/spent", header: fenced(tokB, "report", leaseB), status: 404, code: "not_found"})
	if g := c.do(exchange{what: "get, deleted", on: m, method: "GET", path: "/v1/kv/spent", status: 404, code: "not_found"}); g.header.Get("Fence-Token") != tokB {
		c.failf("get spent after delete: want 404 with Fence-Token %s, got %v", tokB, g.header)
	}
	c.unserved(s, "delete", "KV", exchange{method: "DELETE", path: "/v1/kv/spent", header: fenced("1", "report", "")})
	c.do(exchange{what: "purge, with a fence", on: m, method: "DELETE", path: "/v1/kv/spent?purge=true", header: fenced(tokB, "report", ""), req: reqUnchecked, status: 400, code: "invalid"})
	c.do(exchange{what: "purge, not a boolean", on: m, method: "DELETE", path: "/v1/kv/spent?purge=yes", req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "purge", on: m, method: "DELETE", path: "/v1/kv/spent?purge=true", status: 200})
	c.do(exchange{what: "purge, nothing to purge", on: m, method: "DELETE", path: "/v1/kv/spent?purge=true", status: 404, code: "not_found"})
	c.unserved(s, "purge", "KV", exchange{method: "DELETE", path: "/v1/kv/spent?purge=true"})

	// release
	c.do(exchange{what: "release", on: m, method: "POST", path: nightly + "/release", body: `{"lease":"` + lease + `"}`, status: 200})
	c.do(exchange{what: "release, again", on: m, method: "POST", path: nightly + "/release", body: `{"lease":"` + lease + `"}`, status: 410, code: "not_held"})
	c.do(exchange{what: "release, empty lease", on: m, method: "POST", path: nightly + "/release", body: `{"lease":""}`, req: reqViolates, status: 400, code: "invalid"})
	// release by request id: an abandon
	c.do(exchange{what: "acquire, to abandon", on: m, method: "POST", path: "/v1/locks/abandoned/acquire", body: `{"ttl_ms":30000,"request_id":"openapi-abandon-1"}`, status: 200})
	c.do(exchange{what: "abandon", on: m, method: "POST", path: "/v1/locks/abandoned/release", body: `{"request_id":"openapi-abandon-1","ttl_ms":30000}`, status: 200})
	c.do(exchange{what: "abandon, again", on: m, method: "POST", path: "/v1/locks/abandoned/release", body: `{"request_id":"openapi-abandon-1","ttl_ms":30000}`, status: 410, code: "not_held"})
	c.do(exchange{what: "abandon, with a lease", on: m, method: "POST", path: "/v1/locks/abandoned/release", body: `{"request_id":"openapi-abandon-1","lease":"` + lease + `"}`, req: reqUnchecked, status: 400, code: "invalid"})
	c.do(exchange{what: "abandon, store keeps no request ids", on: s.bare, method: "POST", path: "/v1/locks/x/release", body: `{"request_id":"openapi-abandon-1"}`, status: 501, code: "not_implemented"})
	c.do(exchange{what: "release, body too large", on: m, method: "POST", path: nightly + "/release", body: big, req: reqUnchecked, status: 413, code: "too_large"})
	c.unserved(s, "release", "", exchange{method: "POST", path: "/v1/locks/x/release", body: `{"lease":"` + secret + `"}`})

	// owners and revoke
	h := s.main
	const owner = "host:4242 ./job.sh --nightly"
	c.do(exchange{what: "acquire with an owner", on: h, method: "POST", path: "/v1/locks/owned/acquire", body: `{"ttl_ms":60000,"owner":"` + owner + `"}`, status: 200})
	if st := c.do(exchange{what: "state with an owner", on: h, method: "GET", path: "/v1/locks/owned", status: 200}); st.json["owner"] != owner {
		c.failf("state of a lock acquired with owner %q: want it reported, got %s", owner, st.body)
	}
	c.do(exchange{what: "acquire, owner with a newline", on: h, method: "POST", path: "/v1/locks/x/acquire", body: `{"owner":"a\nb"}`, req: reqViolates, status: 400, code: "invalid"})
	// On a server with the default body limit: 256 bytes of owner are over main's.
	c.do(exchange{what: "acquire, owner over 256 bytes", on: s.authOK, method: "POST", path: "/v1/locks/x/acquire", body: `{"owner":"` + strings.Repeat("o", 257) + `"}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "revoke", on: h, method: "POST", path: "/v1/locks/owned/revoke", body: `{}`, status: 200})
	c.do(exchange{what: "revoke, again", on: h, method: "POST", path: "/v1/locks/owned/revoke", body: `{}`, status: 404, code: "not_held"})
	c.do(exchange{what: "revoke, no body, never acquired", on: h, method: "POST", path: "/v1/locks/never/revoke", status: 404, code: "not_held"})
	c.do(exchange{what: "revoke, unknown field", on: h, method: "POST", path: "/v1/locks/owned/revoke", body: `{"lease":"` + secret + `"}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "revoke, body too large", on: h, method: "POST", path: "/v1/locks/owned/revoke", body: big, req: reqUnchecked, status: 413, code: "too_large"})
	c.unserved(s, "revoke", "Revoker", exchange{method: "POST", path: "/v1/locks/x/revoke", body: `{}`})

	// semaphores and shared locks, on the reference store
	sem := s.authOK
	p0 := c.do(exchange{what: "acquire a permit", on: sem, method: "POST", path: "/v1/locks/pool/acquire", body: `{"ttl_ms":60000,"limit":3,"owner":"w1"}`, status: 200})
	c.do(exchange{what: "acquire a second permit", on: sem, method: "POST", path: "/v1/locks/pool/acquire", body: `{"ttl_ms":60000,"limit":3}`, status: 200})
	if p0.json["slot"] != float64(0) {
		c.failf("acquire a permit of a free semaphore: want slot 0, got %s", p0.body)
	}
	if st := c.do(exchange{what: "state of a semaphore", on: sem, method: "GET", path: "/v1/locks/pool", status: 200}); st.json["limit"] != float64(3) {
		c.failf("state of a semaphore of 3: want limit 3 and its holders, got %s", st.body)
	}
	c.do(exchange{what: "acquire, another limit", on: sem, method: "POST", path: "/v1/locks/pool/acquire", body: `{"limit":5}`, status: 409, code: "limit_mismatch"})
	c.do(exchange{what: "acquire shared", on: sem, method: "POST", path: "/v1/locks/docs/acquire", body: `{"ttl_ms":60000,"shared":true}`, status: 200})
	c.do(exchange{what: "state of a shared lock", on: sem, method: "GET", path: "/v1/locks/docs", status: 200})
	c.do(exchange{what: "list with holders", on: sem, method: "GET", path: "/v1/locks", status: 200})
	c.do(exchange{what: "acquire, limit 0", on: sem, method: "POST", path: "/v1/locks/x/acquire", body: `{"limit":0}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "acquire, limit over 1024", on: sem, method: "POST", path: "/v1/locks/x/acquire", body: `{"limit":1025}`, req: reqViolates, status: 400, code: "invalid"})
	// A schema could say it only with if/then: left to the server.
	c.do(exchange{what: "acquire, shared semaphore", on: sem, method: "POST", path: "/v1/locks/x/acquire", body: `{"limit":2,"shared":true}`, req: reqUnchecked, status: 400, code: "invalid"})
	c.do(exchange{what: "acquire a permit, no semaphores", on: s.bare, method: "POST", path: "/v1/locks/x/acquire", body: `{"limit":2}`, status: 501, code: "not_implemented"})
	c.do(exchange{what: "acquire shared, no shared locks", on: s.bare, method: "POST", path: "/v1/locks/x/acquire", body: `{"shared":true}`, status: 501, code: "not_implemented"})

	// the server's own routes
	c.do(exchange{what: "healthz", on: m, method: "GET", path: "/healthz", status: 200})
	c.do(exchange{what: "healthz without a token on a server with auth", on: s.auth, method: "GET", path: "/healthz", status: 200})
	c.do(exchange{what: "readyz", on: m, method: "GET", path: "/readyz", status: 200})
	c.do(exchange{what: "readyz without a token on a server with auth", on: s.auth, method: "GET", path: "/readyz", status: 200})
	c.do(exchange{what: "metrics", on: m, method: "GET", path: "/metrics", status: 200})
	c.do(exchange{what: "metrics, with the token", on: s.authOK, method: "GET", path: "/metrics", status: 200})
	c.do(exchange{what: "metrics, no token", on: s.auth, method: "GET", path: "/metrics", req: reqViolates, status: 401, code: "unauthorized"})
	c.do(exchange{what: "metrics, a token without admin", on: s.scoped, method: "GET", path: "/metrics", status: 403, code: "forbidden"})
	d := c.do(exchange{what: "openapi", on: m, method: "GET", path: "/v1/openapi.json", status: 200})
	if !bytes.Equal(d.body, fencehttp.OpenAPI()) {
		c.failf("GET /v1/openapi.json: want the embedded document (%d bytes), got %d bytes", len(fencehttp.OpenAPI()), len(d.body))
	}
	c.do(exchange{what: "openapi, with the token", on: s.authOK, method: "GET", path: "/v1/openapi.json", status: 200})
	c.do(exchange{what: "dashboard", on: m, method: "GET", path: "/ui", status: 200})
	c.do(exchange{what: "dashboard without a token on a server with auth", on: s.auth, method: "GET", path: "/ui", status: 200})
	c.do(exchange{what: "dashboard, trailing slash", on: m, method: "GET", path: "/ui/", route: "/ui", status: 200})
	if r := c.do(exchange{what: "root", on: m, method: "GET", path: "/", status: 302}); r.header != nil && r.header.Get("Location") != "/ui" {
		c.failf("GET /: want a redirect to /ui, got Location %q", r.header.Get("Location"))
	}
	c.do(exchange{what: "dashboard script", on: m, method: "GET", path: "/ui/app.js", status: 200})
	c.do(exchange{what: "dashboard, no such file", on: m, method: "GET", path: "/ui/nope.js", status: 404, code: "not_found"})
	c.do(exchange{what: "openapi, wrong token", on: &target{url: s.auth.url, auth: true, token: "guess"}, method: "GET", path: "/v1/openapi.json", status: 401, code: "unauthorized"})
	c.do(exchange{what: "openapi, no token", on: s.auth, method: "GET", path: "/v1/openapi.json", req: reqViolates, status: 401, code: "unauthorized"})

	exerciseCluster(t, c, s)

	// answers no operation has
	c.do(exchange{what: "empty segment", on: m, method: "POST", path: "/v1/locks//acquire", global: "BadPath", status: 400, code: "invalid"})
	c.do(exchange{what: "dot segments in a name", on: m, method: "POST", path: "/v1/locks/a/../b/acquire", global: "BadPath", status: 400, code: "invalid"})
	c.do(exchange{what: "dot segment in a key", on: m, method: "GET", path: "/v1/kv/a/./b", global: "BadPath", status: 400, code: "invalid"})
	c.do(exchange{what: "unknown path", on: m, method: "GET", path: "/v1/nope", global: "NotFound", status: 404, code: "not_found"})
	// The state of the lock "x/bogus" or "x", which takes GET and HEAD only.
	c.do(exchange{what: "POST on a lock whose last segment is no action", on: m, method: "POST", path: "/v1/locks/x/bogus", global: "MethodNotAllowed", status: 405, code: "method_not_allowed"})
	c.do(exchange{what: "POST on a lock without an action", on: m, method: "POST", path: "/v1/locks/x", global: "MethodNotAllowed", status: 405, code: "method_not_allowed"})
	for _, p := range c.doc.Paths.InMatchingOrder() {
		c.do(exchange{what: "a method the path lacks", on: m, method: "PATCH", path: instantiate(p), global: "MethodNotAllowed", status: 405, code: "method_not_allowed"})
	}
	for _, w := range []string{"acquire", "renew", "release", "revoke", "heal"} {
		a := c.do(exchange{what: "GET of an action route", on: m, method: "GET", path: "/v1/locks/x/" + w, global: "MethodNotAllowed", status: 405, code: "method_not_allowed"})
		if a.header != nil && a.header.Get("Allow") != "POST" {
			c.failf("GET /v1/locks/x/%s: want 405 with Allow POST, got Allow %q", w, a.header.Get("Allow"))
		}
	}
}

// Item: the OpenAPI document describes the server exactly: every request and
// answer of every route validates against it, every operation, status and code it
// documents is produced by a real server, and every route the server answers is in
// it.
func TestOpenAPI_DocumentMatchesServer(t *testing.T) {
	c := newChecker(t, fencehttp.OpenAPI())
	s := startServers(t)
	exercise(t, c, s)
	c.probe(s.main)
	c.probe(s.authOK)
	if n := len(c.seen); n < 60 {
		c.failf("coverage: only %d (operation, status, code) seen; the exchanges did not run", n)
	}
	t.Logf("%d exchanges' (operation, status, code) seen, %d documented", len(c.seen), len(documented(c.doc)))
	for _, k := range uncovered(c.doc, c.seen) {
		c.failf("coverage: the document has %s, but no exchange produced it", k)
	}
	c.report()
}

// mutate returns the embedded document changed by f.
func mutate(t *testing.T, f func(doc map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(fencehttp.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	f(doc)
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func obj(v any, path ...string) map[string]any {
	for _, p := range path {
		v = v.(map[string]any)[p]
	}
	return v.(map[string]any)
}

// wantFailure checks that c collected a failure containing each of want.
func wantFailure(t *testing.T, c *checker, want ...string) {
	t.Helper()
	for _, f := range c.failures {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(f, w)
		}
		if ok {
			return
		}
	}
	t.Errorf("want a failure with %q, got %d failures:\n%s", want, len(c.failures), strings.Join(c.failures, "\n"))
}

// Item: the check fails when the document drifts from the server: a renamed
// response field, a route the server answers that the document lacks, an
// operation no exchange produces, a status the document does not give.
func TestOpenAPI_DriftedDocumentIsCaught(t *testing.T) {
	_, hs, _ := newBoltServer(t, fencehttp.Config{})
	m := &target{url: hs.URL}

	t.Run("renamed response field", func(t *testing.T) {
		c := newChecker(t, mutate(t, func(doc map[string]any) {
			lease := obj(doc, "components", "schemas", "Lease")
			props := obj(lease, "properties")
			props["waited"] = props["waited_ms"]
			delete(props, "waited_ms")
			lease["required"] = []any{"name", "token", "lease", "ttl_ms", "waited"}
		}))
		c.do(exchange{what: "acquire", on: m, method: "POST", path: "/v1/locks/drift/acquire", status: 200})
		wantFailure(t, c, "acquire", "does not describe", "waited")
	})
	t.Run("renamed request field", func(t *testing.T) {
		c := newChecker(t, mutate(t, func(doc map[string]any) {
			props := obj(doc, "components", "schemas", "AcquireRequest", "properties")
			props["ttl"] = props["ttl_ms"]
			delete(props, "ttl_ms")
		}))
		c.do(exchange{what: "acquire", on: m, method: "POST", path: "/v1/locks/drift2/acquire", body: `{"ttl_ms":1000}`, status: 200})
		wantFailure(t, c, "does not conform")
	})
	// The whole exercise against a drifted document: what it must catch.
	whole := []struct {
		name   string
		mutate func(doc map[string]any)
		want   []string
	}{
		{"error field missing from the schema", func(doc map[string]any) {
			delete(obj(doc, "components", "schemas", "StaleTokenError", "properties"), "same_token")
		}, []string{"put, same token without its lease", "does not describe", "same_token"}},
		{"error code missing from the enum", func(doc map[string]any) {
			obj(doc, "components", "schemas", "WrongLockError", "properties", "code")["const"] = "wrong_lock_"
		}, []string{"put, another lock's token", "does not describe"}},
		{"response header", func(doc map[string]any) {
			obj(doc, "paths", "/v1/kv/{key}", "get", "responses", "200", "headers", "Fence-Lock", "schema")["pattern"] = "^[a-z]+$"
		}, []string{"get, lock with a slash", "does not describe", "Fence-Lock"}},
		{"Fence-Index header", func(doc map[string]any) {
			obj(doc, "paths", "/v1/locks/{name}", "get", "responses", "200", "headers", "Fence-Index", "schema")["maximum"] = 0
		}, []string{"state, never acquired", "does not describe", "Fence-Index"}},
		{"WWW-Authenticate header", func(doc map[string]any) {
			obj(doc, "components", "responses", "Unauthorized", "headers", "WWW-Authenticate", "schema")["pattern"] = "^Basic "
		}, []string{"openapi, wrong token", "does not describe", "WWW-Authenticate"}},
		{"a 400 the document allows", func(doc map[string]any) {
			delete(obj(doc, "components", "schemas", "TTLms"), "minimum")
		}, []string{"acquire, ttl 0", "refused by the server but the document allows it"}},
		{"a documented status never produced", func(doc map[string]any) {
			obj(doc, "paths", "/metrics", "get", "responses")["503"] = map[string]any{"$ref": "#/components/responses/Unavailable"}
		}, []string{"coverage: the document has metrics 503 unavailable, but no exchange produced it"}},
	}
	for _, w := range whole {
		t.Run(w.name, func(t *testing.T) {
			c := newChecker(t, mutate(t, w.mutate))
			exercise(t, c, startServers(t))
			for _, k := range uncovered(c.doc, c.seen) {
				c.failf("coverage: the document has %s, but no exchange produced it", k)
			}
			wantFailure(t, c, w.want...)
		})
	}
	t.Run("route missing from the document", func(t *testing.T) {
		c := newChecker(t, mutate(t, func(doc map[string]any) {
			delete(obj(doc, "paths"), "/v1/fences/{key}")
		}))
		c.probe(m)
		wantFailure(t, c, "probe: the server answers POST /v1/fences/p1")
	})
	t.Run("status missing from the document", func(t *testing.T) {
		c := newChecker(t, mutate(t, func(doc map[string]any) {
			delete(obj(doc, "paths", "/v1/kv/{key}", "get", "responses"), "404")
		}))
		c.do(exchange{what: "get, never written", on: m, method: "GET", path: "/v1/kv/never", status: 404, code: "not_found"})
		wantFailure(t, c, "get, never written", "status is not supported")
	})
	t.Run("operation never exercised", func(t *testing.T) {
		c := newChecker(t, mutate(t, func(doc map[string]any) {
			obj(doc, "paths")["/v1/locks/{name}/watch"] = map[string]any{
				"parameters": []any{map[string]any{"$ref": "#/components/parameters/LockName"}},
				"post": map[string]any{"operationId": "watchLock", "responses": map[string]any{
					"200": map[string]any{"description": "Watched."}}},
			}
		}))
		// Everything the real document has, seen: only the new operation is missing.
		real := newChecker(t, fencehttp.OpenAPI())
		seen := map[covKey]bool{}
		for _, k := range documented(real.doc) {
			seen[k] = true
		}
		if got := uncovered(c.doc, seen); !slices.Equal(got, []string{"watchLock 200"}) {
			t.Errorf("coverage of a document with an extra operation: want [watchLock 200] uncovered, got %q", got)
		}
		c.probe(m)
		wantFailure(t, c, "probe: the document has POST /v1/locks/p1/watch (watchLock)")
	})
}

// actionWords are the last path segments that make a path a lock action's route.
var actionWords = map[string]bool{"acquire": true, "renew": true, "release": true, "revoke": true, "heal": true}

// exerciseDelete drives DELETE /v1/kv/{key}, fenced and purge, into every answer
// the document gives it. The key ledger holds a value fenced by tokB of the lock
// report (leaseB's); tokA is an older token of report, tokOther the token of the
// live lease leaseOther of the lock other.
func exerciseDelete(c *checker, s *servers, fenced func(token, lock, lease string) map[string]string, tokA, tokB, leaseB, tokOther, leaseOther string) {
	m := s.main
	c.do(exchange{what: "delete, no Fence-Lock", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced(tokB, "", ""), status: 400, code: "invalid"})
	c.do(exchange{what: "delete, stale token", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced(tokA, "report", ""), status: 409, code: "stale_token"})
	c.do(exchange{what: "delete, another lock's token", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced(tokOther, "other", leaseOther), status: 409, code: "wrong_lock"})
	c.do(exchange{what: "delete, live lease's token without its lease", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced(tokB, "report", ""), status: 409, code: "lease_required"})
	c.do(exchange{what: "delete, token never issued", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced("999999", "report", ""), status: 409, code: "unissued_token"})
	c.unserved(s, "delete", "KV", exchange{method: "DELETE", path: "/v1/kv/ledger", header: fenced("1", "report", "")})
	d := c.do(exchange{what: "delete", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced(tokB, "report", leaseB), status: 200})
	if d.json != nil && (d.json["key"] != "ledger" || d.json["lock"] != "report" || jsonField(c.t, d, "token") != tokB) {
		c.failf("delete ledger: want key ledger, lock report, token %s, got %s", tokB, d.body)
	}
	g := c.do(exchange{what: "get, deleted", on: m, method: "GET", path: "/v1/kv/ledger", status: 404, code: "not_found"})
	if g.header != nil && (g.header.Get("Fence-Token") != tokB || g.header.Get("Fence-Lock") != "report") {
		c.failf("get of a deleted key: want its fence (Fence-Token %s, Fence-Lock report), got %v", tokB, g.header)
	}
	c.do(exchange{what: "put after delete, stale token", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokA, "report", ""), body: "x", status: 409, code: "stale_token"})
	c.do(exchange{what: "delete, already deleted", on: m, method: "DELETE", path: "/v1/kv/ledger", header: fenced(tokB, "report", leaseB), status: 404, code: "not_found"})
	c.do(exchange{what: "purge, with Fence-Token", on: m, method: "DELETE", path: "/v1/kv/ledger?purge=true", header: fenced(tokB, "", ""), req: reqUnchecked, status: 400, code: "invalid"})
	p := c.do(exchange{what: "purge", on: m, method: "DELETE", path: "/v1/kv/ledger?purge=true", status: 200})
	if p.json != nil && (p.json["key"] != "ledger" || p.json["purged"] != true) {
		c.failf("purge ledger: want key ledger, purged true, got %s", p.body)
	}
	c.do(exchange{what: "purge, again", on: m, method: "DELETE", path: "/v1/kv/ledger?purge=true", status: 404, code: "not_found"})
	if g := c.do(exchange{what: "get, purged", on: m, method: "GET", path: "/v1/kv/ledger", status: 404, code: "not_found"}); g.header != nil && g.header.Get("Fence-Token") != "" {
		c.failf("get of a purged key: want no fence, got Fence-Token %q", g.header.Get("Fence-Token"))
	}
	c.do(exchange{what: "put after purge, another lock", on: m, method: "PUT", path: "/v1/kv/ledger", header: fenced(tokOther, "other", leaseOther), body: "x", status: 200})
}

// Item: every operation refers to 405 (its path's other methods) and 500 (a bug),
// and every error schema lists its own properties and required fields (no allOf),
// so that code generators keep them required (openapi-typescript drops the
// required fields of an allOf branch that does not define them).
func TestOpenAPI_EveryOperationHas405And500AndFlatErrors(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(fencehttp.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) == 0 || doc.Servers[0].URL != "http://127.0.0.1:7420" {
		t.Errorf("servers: want http://127.0.0.1:7420 (fence serve's default), got %v", doc.Servers)
	}
	n := 0
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			n++
			for status, name := range map[string]string{"405": "MethodNotAllowed", "500": "Internal"} {
				if r := op.Responses.Value(status); r == nil || r.Ref != "#/components/responses/"+name {
					t.Errorf("%s %s (%s): want response %s referring to components.responses.%s", method, path, op.OperationID, status, name)
				}
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d operations: the document did not load", n)
	}
	errs := 0
	for name, s := range doc.Components.Schemas {
		if !strings.HasSuffix(name, "Error") || name == "Error" {
			continue
		}
		errs++
		if len(s.Value.AllOf) != 0 {
			t.Errorf("schema %s: an allOf; want its properties and required listed in it", name)
		}
		for _, req := range s.Value.Required {
			if s.Value.Properties[req] == nil {
				t.Errorf("schema %s: required %q is not among its own properties", name, req)
			}
		}
		if code := s.Value.Properties["code"]; code == nil || code.Value.Const == nil || !slices.Contains(s.Value.Required, "code") {
			t.Errorf("schema %s: want a required code with a const", name)
		}
	}
	if errs < 15 {
		t.Errorf("only %d error schemas", errs)
	}
}

// exerciseCluster drives the cluster routes into every status the document
// gives them: on main and auth (nodes of the test cluster), bare (not in
// cluster mode) and clusterClosed (a closed node).
func exerciseCluster(t *testing.T, c *checker, s *servers) {
	t.Helper()
	m := s.main
	peer, err := freePeers(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := peer["n0"]
	each := func(op string, x exchange) {
		noToken, scoped, closed, plain := x, x, x, x
		noToken.what, noToken.on, noToken.req, noToken.status, noToken.code = op+", no token", s.auth, reqViolates, 401, "unauthorized"
		c.do(noToken)
		if x.method != "GET" || x.path != "/v1/cluster" {
			scoped.what, scoped.on, scoped.status, scoped.code = op+", token out of scope", s.scoped, 403, "forbidden"
			c.do(scoped)
		}
		closed.what, closed.on, closed.status, closed.code = op+", node closed", s.clusterClosed, 503, "unavailable"
		c.do(closed)
		plain.what, plain.on, plain.status, plain.code = op+", not cluster mode", s.bare, 404, "not_found"
		c.do(plain)
	}
	c.do(exchange{what: "cluster status", on: m, method: "GET", path: "/v1/cluster", status: 200})
	c.do(exchange{what: "cluster status, scoped token", on: s.scoped, method: "GET", path: "/v1/cluster", status: 200})
	each("cluster status", exchange{method: "GET", path: "/v1/cluster"})

	add := fmt.Sprintf(`{"name":"oa1","peer":%q}`, addr)
	c.do(exchange{what: "add member", on: m, method: "POST", path: "/v1/cluster/members", body: add, status: 200})
	c.do(exchange{what: "add member, name taken", on: m, method: "POST", path: "/v1/cluster/members", body: add, status: 400, code: "invalid"})
	c.do(exchange{what: "add member, no peer", on: m, method: "POST", path: "/v1/cluster/members", body: `{"name":"oa2"}`, req: reqViolates, status: 400, code: "invalid"})
	c.do(exchange{what: "add member, body too large", on: m, method: "POST", path: "/v1/cluster/members",
		body: `{"name":"oa2","peer":"` + strings.Repeat("h", 300) + `:1"}`, req: reqUnchecked, status: 413, code: "too_large"})
	each("add member", exchange{method: "POST", path: "/v1/cluster/members", body: `{"name":"oa3","peer":"127.0.0.1:1"}`})

	c.do(exchange{what: "remove member", on: m, method: "DELETE", path: "/v1/cluster/members/oa1", status: 200})
	c.do(exchange{what: "remove member, unknown", on: m, method: "DELETE", path: "/v1/cluster/members/oa1", status: 404, code: "not_found"})
	each("remove member", exchange{method: "DELETE", path: "/v1/cluster/members/oa1"})

	if a := c.do(exchange{what: "snapshot", on: m, method: "GET", path: "/v1/cluster/snapshot", status: 200}); len(a.body) == 0 {
		c.failf("snapshot: an empty body")
	}
	each("snapshot", exchange{method: "GET", path: "/v1/cluster/snapshot"})
}
