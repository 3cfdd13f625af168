package main

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// version is what `fence --version` prints after "fence ": the module version and,
// when the build recorded it, the VCS revision and whether the tree was modified,
// e.g. "(devel) rev 0ba33aa (modified)" or "v1.2.3".
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	return formatVersion(bi)
}

// pseudoVersion matches the versions the go command makes up for an untagged
// commit (v0.0.0-20060102150405-abcdefabcdef[+dirty]); they say no more than the
// revision does.
var pseudoVersion = regexp.MustCompile(`^v0\.0\.0-\d{14}-[0-9a-f]{12}(\+dirty)?$`)

func formatVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" || pseudoVersion.MatchString(v) {
		v = "(devel)"
	}
	dirty := strings.HasSuffix(v, "+dirty")
	v = strings.TrimSuffix(v, "+dirty")
	var rev string
	modified := dirty
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = modified || s.Value == "true"
		}
	}
	out := "fence " + v
	// A pseudo-version of a later tag (v1.2.4-0.2006...-abcdefabcdef) names the
	// revision already.
	if len(rev) >= 7 && !strings.Contains(v, rev[:min(12, len(rev))]) {
		out += " rev " + rev[:7]
	}
	if modified {
		out += " (modified)"
	}
	return out
}
