package etcd

import (
	"fmt"
	"strings"

	"github.com/fencelock/fence/driver"
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
	u, err := driver.ParseStoreURL(s, []string{"etcd"}, "dial_timeout")
	if err != nil {
		return nil, nil, fmt.Errorf("etcd: store URL: %w", err)
	}
	var endpoints []string
	for _, h := range u.Hosts {
		endpoints = append(endpoints, "http://"+h)
	}
	opts := &Options{}
	if u.URL.User != nil {
		opts.Username = u.URL.User.Username()
		opts.Password, _ = u.URL.User.Password()
	}
	if p := strings.TrimPrefix(u.URL.Path, "/"); p != "" {
		if !strings.HasSuffix(p, "/") {
			p += "/"
		}
		opts.Prefix = p
	}
	if opts.DialTimeout, err = u.Duration("dial_timeout", "5s"); err != nil {
		return nil, nil, fmt.Errorf("etcd: store URL: %w", err)
	}
	return endpoints, opts, nil
}
