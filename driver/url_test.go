package driver_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/driver"
)

func TestParseStoreURL_HostsQueryAndDuration(t *testing.T) {
	u, err := driver.ParseStoreURL("kv://u:pw@h1:1,h2:2/p?t=2s&t=3s&n=x", []string{"kv", "keyvalue"}, "t", "n", "absent")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(u.Hosts, " "); got != "h1:1 h2:2" {
		t.Errorf("Hosts = %q; want [h1:1 h2:2]", u.Hosts)
	}
	if u.URL.Path != "/p" || u.URL.User.Username() != "u" || u.Query["n"] != "x" {
		t.Errorf("URL = %v, Query = %v; want path /p, user u, n=x", u.URL.Redacted(), u.Query)
	}
	if d, err := u.Duration("t", "5s"); err != nil || d != 3*time.Second {
		t.Errorf("Duration(t) = %v, %v; want the last value, 3s", d, err)
	}
	if d, err := u.Duration("absent", "5s"); err != nil || d != 0 {
		t.Errorf("Duration(absent) = %v, %v; want 0, nil", d, err)
	}
	if _, err := driver.ParseStoreURL("keyvalue://h", []string{"kv", "keyvalue"}); err != nil {
		t.Errorf("second scheme = %v; want accepted", err)
	}
}

func TestParseStoreURL_BadInput_ErrInvalidWithoutPassword(t *testing.T) {
	for _, c := range []struct{ url, reason string }{
		{"other://u:secret@h:1", "scheme must be kv://"},
		{"kv://u:secret@", "has no host:port"},
		{"kv://u:secret@h1:1,,h2:2", "has an empty host in its list"},
		{"kv://u:secret@h:1?color=red", `unknown parameter "color"`},
		{"kv://u:secret@[::1", "missing ']' in host"},
		{"kv://u:secret@h:1?t=soon", "must be a positive duration such as 5s"},
		{"kv://u:secret@h:1?t=-1s", "must be a positive duration such as 5s"},
	} {
		u, err := driver.ParseStoreURL(c.url, []string{"kv"}, "t")
		if err == nil {
			_, err = u.Duration("t", "5s")
		}
		var inv *fence.InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, fence.ErrInvalid) || inv.Reason != c.reason {
			t.Errorf("ParseStoreURL(%q) = %v; want a *fence.InvalidError with reason %q", c.url, err, c.reason)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseStoreURL(%q) error %q shows the password", c.url, err)
		}
	}
}
