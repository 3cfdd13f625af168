package etcd

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ParseURL parses a store URL of the form
//
//	etcd://[user:password@]host:port[,host:port...][/prefix/][?dial_timeout=5s]
//
// as given to `fence serve --store`, into the endpoints and Options for Open. The
// path, if any, is the key prefix (a trailing "/" is added). It returns an error
// matching fence.ErrInvalid for another scheme, no host, an empty host in the list,
// an unknown query parameter or a bad dial_timeout.
func ParseURL(s string) ([]string, *Options, error) {
	u, err := url.Parse(s)
	if err != nil {
		reason := "is not a URL"
		var ue *url.Error
		if errors.As(err, &ue) { // ue.Error() would quote the URL, password and all
			reason = ue.Err.Error()
		}
		return nil, nil, fmt.Errorf("etcd: store URL: %w", invalid("url", redact(s), reason))
	}
	if u.Scheme != "etcd" {
		return nil, nil, fmt.Errorf("etcd: store URL: %w", invalid("url", u.Redacted(), "scheme must be etcd://"))
	}
	if u.Host == "" {
		return nil, nil, fmt.Errorf("etcd: store URL: %w", invalid("url", u.Redacted(), "has no host:port"))
	}
	var endpoints []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, nil, fmt.Errorf("etcd: store URL: %w", invalid("url", u.Redacted(), "has an empty host in its list"))
		}
		endpoints = append(endpoints, "http://"+h)
	}
	opts := &Options{}
	if u.User != nil {
		opts.Username = u.User.Username()
		opts.Password, _ = u.User.Password()
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		if !strings.HasSuffix(p, "/") {
			p += "/"
		}
		opts.Prefix = p
	}
	for k, vs := range u.Query() {
		switch k {
		case "dial_timeout":
			d, err := time.ParseDuration(vs[len(vs)-1])
			if err != nil || d <= 0 {
				return nil, nil, fmt.Errorf("etcd: store URL: %w", invalid("dial_timeout", vs[len(vs)-1], "must be a positive duration such as 5s"))
			}
			opts.DialTimeout = d
		default:
			return nil, nil, fmt.Errorf("etcd: store URL: %w", invalid("url", u.Redacted(), fmt.Sprintf("unknown parameter %q", k)))
		}
	}
	return endpoints, opts, nil
}

// redact cuts an unparsable URL after its scheme, in case it holds a password.
func redact(s string) string {
	scheme, _, _ := strings.Cut(s, ":")
	return scheme + ":..."
}
