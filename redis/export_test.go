package redis

import "fmt"

// Helpers for the examples (package redis_test), which run against the package's
// redis-server.

// ServerAddrForExamples returns the address of the tests' redis-server.
func ServerAddrForExamples() string { return srv.Addr }

// PrefixForExamples returns a key prefix no other example or test uses, so an
// example's tokens start at 1 however often the suite runs.
func PrefixForExamples() string { return fmt.Sprintf("example-%d:", nameSeq.Add(1)) }
