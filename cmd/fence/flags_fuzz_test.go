package main

import (
	"errors"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
)

// FuzzTTLFlag: the --ttl of acquire, renew and lock parses as time.ParseDuration
// does, and the lock NAME and TTL checks accept exactly the valid name and TTL
// (whole milliseconds in [MinTTL, MaxTTL]), refusing anything else as a usage
// error (exit 2). A longer run:
//
//	go test ./cmd/fence -run '^$' -fuzz '^FuzzTTLFlag$' -fuzztime 5m
func FuzzTTLFlag(f *testing.F) {
	for _, s := range []string{"30s", "1ms", "24h", "24h0m0.001s", "999us", "1.5ms", "0", "-1s", "1", "1e3s", "9223372036854775807ns", "99999999999h", ""} {
		f.Add("jobs/a", s)
	}
	f.Add("", "1s")
	f.Add("a\x00", "1s")
	f.Fuzz(func(t *testing.T, name, s string) {
		want, perr := time.ParseDuration(s)
		for _, cmd := range []func() *cobra.Command{newAcquireCmd, newRenewCmd, newLockCmd} {
			c := cmd()
			err := c.ParseFlags([]string{"--ttl=" + s})
			if (err != nil) != (perr != nil) {
				t.Fatalf("%s --ttl=%q: %v; time.ParseDuration: %v", c.Name(), s, err, perr)
			}
			if err != nil {
				continue
			}
			ttl, err := c.Flags().GetDuration("ttl")
			if err != nil || ttl != want {
				t.Fatalf("%s --ttl=%q = %v, %v; want %v", c.Name(), s, ttl, err, want)
			}
			valid := fence.ValidateName(name) == nil && fence.ValidateTTL(ttl) == nil
			err = checkLockAndTTL(name, ttl)
			var ue usageError
			if (err == nil) != valid || err != nil && !errors.As(err, &ue) {
				t.Fatalf("checkLockAndTTL(%q, %v): %v, want valid %v and a usage error", name, ttl, err, valid)
			}
		}
	})
}
