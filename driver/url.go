package driver

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// StoreURL is a store URL as `fence serve --store` takes it, split into the parts
// every backend reads the same way.
type StoreURL struct {
	// URL is the parsed URL: a backend reads its User and Path. Its Redacted form is
	// what error messages show.
	URL *url.URL
	// Hosts is the comma-separated host[:port] list of the URL's authority, in
	// order; none is empty.
	Hosts []string
	// Query holds the last value of each query parameter; every name is one the
	// backend knows.
	Query map[string]string
}

// ParseStoreURL parses a store URL of the form
//
//	scheme://[user[:password]@]host:port[,host:port...][/path][?name=value...]
//
// schemes are the schemes the backend accepts, at least one (messages name the
// first), and params the query parameters it knows. It returns a
// *fence.InvalidError naming "url" (matching fence.ErrInvalid) for a string that is
// not a URL, another scheme, no host, an empty host in the list or an unknown
// parameter. No error shows the password.
func ParseStoreURL(s string, schemes []string, params ...string) (*StoreURL, error) {
	u, err := url.Parse(s)
	if err != nil {
		reason := "is not a URL"
		var ue *url.Error
		if errors.As(err, &ue) { // ue.Error() would quote the URL, password and all
			reason = ue.Err.Error()
		}
		scheme, _, _ := strings.Cut(s, ":")
		return nil, &fence.InvalidError{Field: "url", Value: scheme + ":...", Reason: reason}
	}
	su := &StoreURL{URL: u, Query: map[string]string{}}
	if !slices.Contains(schemes, u.Scheme) {
		return nil, su.Invalid(fmt.Sprintf("scheme must be %s://", schemes[0]))
	}
	if u.Host == "" {
		return nil, su.Invalid("has no host:port")
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, su.Invalid("has an empty host in its list")
		}
		su.Hosts = append(su.Hosts, h)
	}
	for k, vs := range u.Query() {
		if !slices.Contains(params, k) {
			return nil, su.Invalid(fmt.Sprintf("unknown parameter %q", k))
		}
		su.Query[k] = vs[len(vs)-1]
	}
	return su, nil
}

// Invalid returns a *fence.InvalidError naming "url", with u's redacted form
// (without the password) as its value and reason as its reason.
func (u *StoreURL) Invalid(reason string) error {
	return &fence.InvalidError{Field: "url", Value: u.URL.Redacted(), Reason: reason}
}

// Duration returns the query parameter name as a duration, and 0 if the URL does
// not set it. For a value that is not a positive duration it returns a
// *fence.InvalidError naming the parameter, whose reason shows example ("5s").
func (u *StoreURL) Duration(name, example string) (time.Duration, error) {
	v, ok := u.Query[name]
	if !ok {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, &fence.InvalidError{Field: name, Value: v, Reason: "must be a positive duration such as " + example}
	}
	return d, nil
}
