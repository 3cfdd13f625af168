package etcd_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/etcd"
)

func TestParseURL_EndpointsPrefixAuthTimeout(t *testing.T) {
	eps, opts, err := etcd.ParseURL("etcd://u:pw@h1:2379,h2:2380/app/locks?dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://h1:2379", "http://h2:2380"}; !slices.Equal(eps, want) {
		t.Errorf("endpoints = %q; want %q", eps, want)
	}
	if opts.Prefix != "app/locks/" || opts.Username != "u" || opts.Password != "pw" || opts.DialTimeout != 2*time.Second {
		t.Errorf("options = %+v; want Prefix app/locks/, Username u, Password pw, DialTimeout 2s", *opts)
	}
	_, opts, err = etcd.ParseURL("etcd://h1:2379")
	if err != nil || opts.Prefix != "" {
		t.Errorf("ParseURL without a path = %+v, %v; want the default prefix", opts, err)
	}
}

func TestParseURL_BadInput_ErrInvalidWithoutPassword(t *testing.T) {
	for _, s := range []string{
		"redis://h:1", "etcd://", "etcd://h1:2379,,h2:2379", "etcd://h:1?dial_timeout=soon",
		"etcd://h:1?color=red", "etcd://u:secret@h:1?dial_timeout=-1s", "etcd://u:secret@[::1",
	} {
		_, _, err := etcd.ParseURL(s)
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("ParseURL(%q) = %v; want an error matching fence.ErrInvalid", s, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q) error %q shows the password", s, err)
		}
	}
}
