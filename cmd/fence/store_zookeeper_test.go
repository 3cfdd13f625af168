package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestServe_StoreZooKeeper_BadURL_UsageError(t *testing.T) {
	for _, store := range []string{
		"zk://",                        // no host
		"zk://127.0.0.1:2181,",         // empty host in the list
		"zk://127.0.0.1:2181/?bogus=1", // unknown parameter
		"zk://127.0.0.1:2181?session_timeout=-1s",
		"zk://user:secret@127.0.0.1:2181",    // user info, never echoed
		"zk://127.0.0.1:2181/relative//root", // bad root
	} {
		_, err := openStore(context.Background(), store, t.TempDir())
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("openStore(%q) = %v; want a usage error", store, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("openStore(%q) = %v; want the password redacted", store, err)
		}
	}
}
