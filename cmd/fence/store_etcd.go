package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/fencelock/fence/etcd"
)

// openEtcdStore serves locks and the fenced KV from an etcd cluster:
// --store etcd://h1:2379,h2:2379[/prefix/]. Servers on one cluster with the same
// prefix share locks and data, and waiters are woken by watches, so several
// `fence serve` instances can stand behind one load balancer. TTLs below etcd's
// minimum lease TTL (2s with etcd's default timing) are granted as asked on the
// holder's side (the reply's ttl_ms), while etcd keeps the lock until it revokes the
// lease: see "Leases and TTLs" in package etcd.
func openEtcdStore(ctx context.Context, u *url.URL, _ string) (*servedStore, error) {
	endpoints, opts, err := etcd.ParseURL(u.String())
	if err != nil {
		return nil, usageError{fmt.Errorf("--store %s: %w", redactURL(u.String()), err)}
	}
	s, err := etcd.Open(ctx, endpoints, opts)
	if err != nil {
		return nil, fmt.Errorf("serve: etcd store %s: %w", redactURL(u.String()), err)
	}
	return &servedStore{locker: s, kv: s, close: s.Close, desc: "etcd:" + redactURL(u.String())}, nil
}
