package fencehttp

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp/ui"
)

// The routes of the API, read from a request's method and escaped path by one
// parser (parseRoute) that the router, the scope check of scoped tokens
// (permit) and the metrics' route label (routeOf) share, so that they can
// never disagree on which lock, key or action a request names.

// routeKind is what a request's path names, whatever its method.
type routeKind uint8

const (
	routeNone       routeKind = iota // no route: 404
	routeRoot                        // /: the redirect to the dashboard
	routeHealth                      // /healthz
	routeReady                       // /readyz
	routeUI                          // /ui and /ui/FILE: the dashboard (package ui)
	routeMetrics                     // /metrics
	routeOpenAPI                     // /v1/openapi.json
	routeList                        // /v1/locks and /v1/locks/: the listing
	routeLock                        // /v1/locks/{name}: its state, a blocking query
	routeLockAction                  // /v1/locks/{name}/{action}
	routeKV                          // /v1/kv/{key}
	routeFences                      // /v1/fences/{key}

	// The routes of cluster mode (Config.Cluster); without it they are 404.
	routeCluster         // /v1/cluster: the members
	routeClusterMembers  // /v1/cluster/members: add one
	routeClusterMember   // /v1/cluster/members/{name}: remove it
	routeClusterSnapshot // /v1/cluster/snapshot: a backup of the store
)

// cluster reports whether k is a route of cluster mode.
func (k routeKind) cluster() bool { return k >= routeCluster && k <= routeClusterSnapshot }

// allowed is the methods each route serves, as its Allow header lists them: a
// request with any other method is answered 405 with this list, before any
// handler sees it.
var allowed = [...]string{
	routeNone:       "",
	routeRoot:       "GET, HEAD",
	routeHealth:     "GET, HEAD",
	routeReady:      "GET, HEAD",
	routeUI:         "GET, HEAD",
	routeMetrics:    "GET, HEAD",
	routeOpenAPI:    "GET, HEAD",
	routeList:       "GET, HEAD",
	routeLock:       "GET, HEAD",
	routeLockAction: "POST",
	routeKV:         "GET, HEAD, PUT, DELETE",
	routeFences:     "POST",

	routeCluster:         "GET, HEAD",
	routeClusterMembers:  "POST",
	routeClusterMember:   "DELETE",
	routeClusterSnapshot: "GET, HEAD",
}

// lockActions are the words that, as the last raw segment of a path under
// /v1/locks/, make it the route of that action on the name before it.
var lockActions = [...]string{"acquire", "renew", "release", "revoke", "heal"}

// route is what parseRoute reads from a request.
type route struct {
	kind   routeKind
	action string // routeLockAction's: one of lockActions
	esc    string // the escaped lock name (routeLock, routeLockAction) or key (routeKV, routeFences)
	served bool   // the route serves the request's method (allowed)
}

// parseRoute maps a request's method and escaped path (URL.EscapedPath) to its
// route. Under /v1/locks/, a path whose last raw segment is an action word
// (lockActions) is that action's route on the name before it, for every
// method, so GET /v1/locks/x/acquire is the acquire route (405: it takes POST),
// never the state of a lock "x/acquire"; a lock whose name ends in such a
// segment is sent with that slash escaped (x%2Facquire), as EscapeName does. A
// path of one segment (/v1/locks/acquire) is the lock of that name: an action
// needs a name before it. Any other path under /v1/locks/ is a lock's own route.
func parseRoute(method, escaped string) route {
	var rt route
	switch {
	case escaped == "/":
		rt.kind = routeRoot
	case escaped == "/healthz":
		rt.kind = routeHealth
	case escaped == "/readyz":
		rt.kind = routeReady
	case escaped == "/ui" || strings.HasPrefix(escaped, "/ui/"):
		rt.kind = routeUI
	case escaped == "/metrics":
		rt.kind = routeMetrics
	case escaped == "/v1/openapi.json":
		rt.kind = routeOpenAPI
	case escaped == "/v1/locks" || escaped == "/v1/locks/":
		rt.kind = routeList
	case strings.HasPrefix(escaped, "/v1/locks/"):
		rt.kind, rt.esc = routeLock, escaped[len("/v1/locks/"):]
		if i := strings.LastIndexByte(rt.esc, '/'); i >= 0 {
			if a := lockAction(rt.esc[i+1:]); a != "" {
				rt.kind, rt.action, rt.esc = routeLockAction, a, rt.esc[:i]
			}
		}
	case strings.HasPrefix(escaped, "/v1/kv/"):
		rt.kind, rt.esc = routeKV, escaped[len("/v1/kv/"):]
	case strings.HasPrefix(escaped, "/v1/fences/"):
		rt.kind, rt.esc = routeFences, escaped[len("/v1/fences/"):]
	case escaped == "/v1/cluster":
		rt.kind = routeCluster
	case escaped == "/v1/cluster/members":
		rt.kind = routeClusterMembers
	case escaped == "/v1/cluster/snapshot":
		rt.kind = routeClusterSnapshot
	case strings.HasPrefix(escaped, "/v1/cluster/members/") && !strings.Contains(escaped[len("/v1/cluster/members/"):], "/"):
		rt.kind, rt.esc = routeClusterMember, escaped[len("/v1/cluster/members/"):]
	}
	rt.served = listed(allowed[rt.kind], method)
	return rt
}

// requestRoute is parseRoute of r.
func requestRoute(r *http.Request) route { return parseRoute(r.Method, r.URL.EscapedPath()) }

// lockAction returns seg if it is an action word, else "".
func lockAction(seg string) string {
	for _, a := range lockActions {
		if seg == a {
			return a
		}
	}
	return ""
}

// listed reports whether method is in list, an Allow header's value.
func listed(list, method string) bool {
	for list != "" {
		m, rest, _ := strings.Cut(list, ", ")
		if m == method {
			return true
		}
		list = rest
	}
	return false
}

// name returns the lock name or key of rt, unescaped and validated (see
// unescapeName), as every handler and the scope check read it. A name sent
// with unescaped slashes whose last segment is an escaped action word
// (x/acqu%69re) is refused: a proxy that normalises escapes of unreserved
// characters, as RFC 3986 allows, would make it that action's route; the lock
// "x/acquire" is sent as x%2Facquire.
func (rt route) name() (string, error) {
	field := "name"
	if rt.kind == routeKV || rt.kind == routeFences {
		field = "key"
	}
	if rt.kind == routeLock {
		if i := strings.LastIndexByte(rt.esc, '/'); i >= 0 {
			if last, err := url.PathUnescape(rt.esc[i+1:]); err == nil && lockAction(last) != "" {
				return "", &fence.InvalidError{Field: field, Value: rt.esc,
					Reason: fmt.Sprintf("ends in an escaped %q segment, which a proxy may read as that action; send the name as one escaped segment ('/' as %%2F)", last)}
			}
		}
	}
	return unescapeName(field, rt.esc)
}

// label names rt for metrics and logs, without names or keys.
func (rt route) label() string {
	switch rt.kind {
	case routeLockAction:
		return "locks/" + rt.action
	case routeList, routeLock:
		return "locks"
	case routeKV:
		return "kv"
	case routeFences:
		return "fences"
	case routeHealth:
		return "healthz"
	case routeReady:
		return "readyz"
	case routeMetrics:
		return "metrics"
	case routeOpenAPI:
		return "openapi"
	case routeCluster:
		return "cluster"
	case routeClusterMembers, routeClusterMember:
		return "cluster/members"
	case routeClusterSnapshot:
		return "cluster/snapshot"
	}
	return "other"
}

// notServed answers 405 to a request whose route does not serve its method,
// with the route's Allow header.
func (s *Server) notServed(w http.ResponseWriter, r *http.Request, rt route) {
	allow := allowed[rt.kind]
	hint := ""
	switch rt.kind {
	case routeLockAction:
		hint = fmt.Sprintf("; a lock whose name ends in /%s is sent with that '/' escaped (%%2F%s)", rt.action, rt.action)
	case routeLock:
		if r.Method == http.MethodPost {
			hint = "; a lock's actions are POST /v1/locks/{name}/acquire, renew, release, revoke or heal"
		}
	}
	w.Header().Set("Allow", allow)
	s.fail(w, r, "", "", because(errMethod, "method %s not allowed on %s (allowed: %s)%s", r.Method, r.URL.EscapedPath(), allow, hint))
}

// dashboardPath is where GET / sends a browser: the dashboard's page.
const dashboardPath = ui.Prefix

// redirectToUI answers GET / (and HEAD): 302 to the dashboard, without a body.
func redirectToUI(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Location", dashboardPath)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusFound)
}
