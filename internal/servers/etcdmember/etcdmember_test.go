package etcdmember

import (
	"errors"
	"testing"
)

func TestConfig_Embed_BadConfig_Invalid(t *testing.T) {
	good := Config{Name: "m0", Dir: t.TempDir(), ClientURL: "http://127.0.0.1:1", PeerURL: "http://127.0.0.1:2", InitialCluster: "m0=http://127.0.0.1:2"}
	if cfg, err := good.Embed(); err != nil || cfg.TickMs != TickMs || cfg.ElectionMs != ElectionMs {
		t.Fatalf("Embed(good) = %v, %v; want a config with ticks %d ms and election %d ms", cfg, err, TickMs, ElectionMs)
	}
	for name, mut := range map[string]func(*Config){
		"no name":        func(c *Config) { c.Name = "" },
		"no dir":         func(c *Config) { c.Dir = "" },
		"no cluster":     func(c *Config) { c.InitialCluster = "" },
		"bad client url": func(c *Config) { c.ClientURL = "127.0.0.1:1" },
		"bad peer url":   func(c *Config) { c.PeerURL = "::" },
	} {
		c := good
		mut(&c)
		if _, err := c.Embed(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Embed() error = %v; want ErrConfig", name, err)
		}
	}
}
