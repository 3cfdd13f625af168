package fencehttp

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fencelock/fence/internal/service"
)

// Rights are what a scoped bearer token may do, as a set of bits.
type Rights = service.Rights

// The rights of a scoped token. Each route needs one of them on the lock name or
// key it names; RightAdmin includes the others.
const (
	// RightRead: GET of a lock's state (and its blocking queries), of the list of
	// locks, and of a key's value.
	RightRead = service.RightRead
	// RightLock: acquire, renew and release.
	RightLock = service.RightLock
	// RightWrite: PUT and DELETE /v1/kv/{key} and POST /v1/fences/{key}.
	RightWrite = service.RightWrite
	// RightAdmin: revoke and heal, purge (DELETE /v1/kv/{key}?purge=true),
	// /metrics, and all of the above.
	RightAdmin = service.RightAdmin

	// RightsAll is every right: what a token in Config.AuthTokens has.
	RightsAll = service.RightsAll
)

// AuthToken is a bearer token with what it may do: Rights on the lock names and
// keys that match one of Names. A name pattern ending in '*' matches every name
// that starts with what comes before it ("jobs/*" matches "jobs/a", not "jobsx";
// "a*" matches "a" and "ab"); any other pattern matches that one name exactly
// ("a" matches "a", not "ab"); "*" matches all. Nil Names match all.
type AuthToken = service.AuthToken

// ParseAuthTokens reads a token file, as `fence serve --auth-token-file` does: one
// token a line, blank lines and lines starting with # skipped. A line is
//
//	SECRET [RIGHTS [PATTERN ...]]
//
// with RIGHTS a comma-separated list of read, lock, write and admin (or all), and
// each PATTERN a lock name or key, or a prefix ending in '*' (see AuthToken). A
// line with the secret alone has every right on every name, as tokens had before
// scopes; one with rights and no pattern has them on every name. The secret may
// not contain white space. It returns an error matching fence.ErrInvalid that
// names the line for a malformed line, a bad pattern or a secret given twice.
func ParseAuthTokens(r io.Reader) ([]AuthToken, error) {
	toks, err := service.ParseAuthTokens(r)
	if err != nil {
		return nil, fmt.Errorf("fencehttp: %w", err)
	}
	return toks, nil
}

// ErrForbidden means the server accepted the request's bearer token, but the
// token lacks the right the request needs on its lock or key (403).
var ErrForbidden = errors.New("fencehttp: forbidden")

// permitRoute returns nil if t may make request r, whose route is rt
// (parseRoute, the router's own reading of it), or the error of
// service.ErrForbidden that says what was refused: the route names the
// service's operation (opOf), whose rights the service checks. The name checked
// is the one the handler acts on (route.name). A request the handler refuses
// whatever the token (no route, a method its route does not serve, a malformed
// name) is let through: the handler answers it as it would without scopes, and
// it changes nothing.
func permitRoute(t *AuthToken, r *http.Request, rt route) error {
	if t.Rights&RightAdmin != 0 && t.Names == nil {
		return nil
	}
	if !rt.served {
		return nil
	}
	var op string
	switch rt.kind {
	case routeMetrics:
		return t.Permit("metrics", "")
	case routeList:
		return t.Permit("list", r.URL.Query().Get("prefix"))
	case routeLock:
		op = "inspect"
	case routeLockAction:
		op = rt.action
	case routeKV:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			op = "get"
		case http.MethodDelete:
			op = "delete"
		default:
			op = "put"
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.URL.Query().Has("purge") {
			op = "purge" // a purge sets a key's fence back
		}
	case routeFences:
		op = "fence"
	case routeCluster:
		return t.Permit("cluster status", "")
	case routeClusterMembers, routeClusterMember, routeClusterSnapshot:
		return t.Permit("cluster admin", "")
	default: // the redirect, /healthz, /readyz, the dashboard, /v1/openapi.json
		return nil
	}
	name, err := rt.name()
	if err != nil {
		return nil
	}
	return t.Permit(op, name)
}
