package zookeeper_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/zookeeper"
)

func TestParseURL_ServersRootAndTimeout(t *testing.T) {
	servers, opts, err := zookeeper.ParseURL("zk://h1:2181,h2:2182/app/locks?session_timeout=4s")
	if err != nil {
		t.Fatalf("ParseURL = %v", err)
	}
	if strings.Join(servers, ",") != "h1:2181,h2:2182" || opts.Root != "/app/locks" || opts.SessionTimeout != 4*time.Second {
		t.Fatalf("ParseURL = %q, %+v; want [h1:2181 h2:2182], Root /app/locks, SessionTimeout 4s", servers, opts)
	}
	_, opts, err = zookeeper.ParseURL("zk://h1:2181")
	if err != nil || opts.Root != "" {
		t.Fatalf("ParseURL without a path = %+v, %v; want the default root (empty), nil", opts, err)
	}
}

func TestParseURL_BadInput_ErrInvalid(t *testing.T) {
	for _, s := range []string{"etcd://h:1", "zk://", "zk://h1:1,,h2:2", "zk://h:1?x=1", "zk://h:1?session_timeout=soon", "zk://u:pw@h:1", "zk://h:1//a", "::"} {
		_, _, err := zookeeper.ParseURL(s)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ParseURL(%q) = %v; want ErrInvalid", s, err)
			continue
		}
		if strings.Contains(err.Error(), "pw") {
			t.Errorf("ParseURL(%q) error %q shows the password", s, err)
		}
	}
}
