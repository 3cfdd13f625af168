package zookeeper

import (
	"fmt"
	"strings"

	"github.com/fencelock/fence/driver"
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
	u, err := driver.ParseStoreURL(s, []string{"zk", "zookeeper"}, "session_timeout")
	if err == nil && u.URL.User != nil {
		err = u.Invalid("user info is not supported")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("zookeeper: store URL: %w", err)
	}
	opts := &Options{}
	if p := strings.TrimSuffix(u.URL.Path, "/"); p != "" {
		if err := validRoot(p); err != nil {
			return nil, nil, err
		}
		opts.Root = p
	}
	if opts.SessionTimeout, err = u.Duration("session_timeout", "10s"); err != nil {
		return nil, nil, fmt.Errorf("zookeeper: store URL: %w", err)
	}
	return u.Hosts, opts, nil
}
