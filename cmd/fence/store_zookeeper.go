package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/fencelock/fence/zookeeper"
)

// openZooKeeperStore serves locks and the fenced KV from a ZooKeeper ensemble:
// --store zk://h1:2181,h2:2181[/root][?session_timeout=10s]. Locks live under the
// root (default /fence/locks) and data under its KV sibling (/fence/kv), so servers on
// one ensemble with the same root share locks and data.
func openZooKeeperStore(_ context.Context, u *url.URL, _ string) (*servedStore, error) {
	servers, opts, err := zookeeper.ParseURL(u.String())
	if err != nil {
		return nil, usageError{fmt.Errorf("--store %s: %w", redactURL(u.String()), err)}
	}
	s, err := zookeeper.OpenStore(servers, opts)
	if err != nil {
		return nil, fmt.Errorf("serve: zookeeper store %s: %w", redactURL(u.String()), err)
	}
	return &servedStore{locker: s, kv: s, close: s.Close, desc: "zookeeper:" + redactURL(u.String())}, nil
}
