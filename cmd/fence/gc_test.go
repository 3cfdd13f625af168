package main

import (
	"strings"
	"testing"
)

// fence serve runs the GC at --gc-percent, 50 by default; GOGC, if set, wins over
// the default but not over the flag. /metrics shows the setting in force.
func TestServe_GCPercent_DefaultEnvAndFlag(t *testing.T) {
	for _, c := range []struct {
		env  string // GOGC; "" unset
		args []string
		want float64
	}{
		{"", nil, defaultServeGCPercent},
		{"80", nil, 80},
		{"80", []string{"--gc-percent", "30"}, 30},
		{"", []string{"--gc-percent", "200"}, 200},
	} {
		t.Run(c.env+strings.Join(c.args, " "), func(t *testing.T) {
			if c.env != "" {
				t.Setenv("GOGC", c.env)
			}
			p, err := startServe(t.TempDir(), c.args...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.stop()
			if got := metric(t, p.url, "go_gc_gogc_percent"); got != c.want {
				t.Errorf("GOGC=%q %v: go_gc_gogc_percent %v, want %v", c.env, c.args, got, c.want)
			}
		})
	}
}

func TestServe_GCPercent_Bad_Exit2(t *testing.T) {
	for _, v := range []string{"0", "-2", "x"} {
		r := runFence(t, "", nil, "", "serve", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--gc-percent", v)
		wantCode(t, "--gc-percent "+v, r, 2)
	}
}
