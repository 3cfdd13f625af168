// Package bench_test compares fence serve over HTTP with etcd's concurrency.Mutex on
// an embedded single-member etcd, in one run:
//
//	go test -run XXX -bench . -benchtime 3s ./fencehttp/bench
//
// BenchmarkPairs reports acquire+release pairs/s for fence over HTTP (bolt store,
// keep-alive) and for etcd (one session per client), at 1 and 16 concurrent clients
// on distinct names. BenchmarkHandoff reports the median time from the holder's
// release to the waiter's grant, the waiter long-polling. BenchmarkWatch reports
// the median time from the holder's release to a Client.Watch of the lock yielding
// it. BenchmarkVsRedislock compares fence serve through the Go client with
// bsm/redislock on a throwaway redis-server, in alternating rounds (issue 19's
// ratios); testdata/wrk.sh compares a lock request with /healthz under wrk. It is
// a separate package so that the fencehttp tests do not link the etcd
// server.
package bench_test
