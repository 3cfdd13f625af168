package zookeeper

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/fencelock/fence"
)

// ParseURL parses a store URL of the form
//
//	zk://host:port[,host:port...][/root][?session_timeout=10s]
//
// as given to `fence serve --store`, into the servers and Options for Open. The path,
// if any, is Options.Root. It returns an error matching fence.ErrInvalid for another
// scheme, user info (ZooKeeper digest auth is not supported here), no host, an empty
// host in the list, an unknown query parameter or a bad session_timeout.
func ParseURL(s string) ([]string, *Options, error) {
	bad := func(field, value, reason string) error {
		return fmt.Errorf("zookeeper: store URL: %w", &fence.InvalidError{Field: field, Value: value, Reason: reason})
	}
	u, err := url.Parse(s)
	if err != nil {
		scheme, _, _ := strings.Cut(s, ":")
		return nil, nil, bad("url", scheme+":...", "is not a URL")
	}
	if u.Scheme != "zk" && u.Scheme != "zookeeper" {
		return nil, nil, bad("url", u.Redacted(), "scheme must be zk://")
	}
	if u.User != nil {
		return nil, nil, bad("url", u.Redacted(), "user info is not supported")
	}
	if u.Host == "" {
		return nil, nil, bad("url", u.Redacted(), "has no host:port")
	}
	var servers []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, nil, bad("url", u.Redacted(), "has an empty host in its list")
		}
		servers = append(servers, h)
	}
	opts := &Options{}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		if err := validRoot(p); err != nil {
			return nil, nil, err
		}
		opts.Root = p
	}
	for k, vs := range u.Query() {
		switch k {
		case "session_timeout":
			d, err := time.ParseDuration(vs[len(vs)-1])
			if err != nil || d <= 0 {
				return nil, nil, bad("session_timeout", vs[len(vs)-1], "must be a positive duration such as 10s")
			}
			opts.SessionTimeout = d
		default:
			return nil, nil, bad("url", u.Redacted(), fmt.Sprintf("unknown parameter %q", k))
		}
	}
	return servers, opts, nil
}
