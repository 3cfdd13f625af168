package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The fault clock exists only in the binary built with -tags faultclock: the
// default build does not link it (nor read its environment variable), and the
// tagged build does.
func TestBinary_FaultClockOnlyWithTag(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found: cannot list the binary's dependencies")
	}
	const pkg, clock = "github.com/fencelock/fence/cmd/fence", "github.com/fencelock/fence/internal/faultclock"
	deps := func(args ...string) []string {
		out, err := exec.Command(gobin, append(append([]string{"list", "-deps"}, args...), pkg)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %v %s: %v\n%s", args, pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	if slices.Contains(deps(), clock) {
		t.Errorf("the default build of %s links %s, want the fault clock only with -tags faultclock", pkg, clock)
	}
	if !slices.Contains(deps("-tags", "faultclock"), clock) {
		t.Errorf("the -tags faultclock build of %s does not link %s", pkg, clock)
	}
	files, err := exec.Command(gobin, "list", "-f", "{{join .GoFiles \" \"}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -f GoFiles: %v\n%s", err, files)
	}
	if strings.Contains(string(files), "faultclock_on.go") || !strings.Contains(string(files), "faultclock_off.go") {
		t.Errorf("default build's files %s, want faultclock_off.go and not faultclock_on.go", files)
	}
}
