package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binary must not link test machinery: the testing package, or the
// test-server helpers of internal/testserv, whose job is to fail tests. Programs that
// start throwaway servers (fence chaos, a benchmark) use internal/servers instead.
func TestBinary_LinksNoTestMachinery(t *testing.T) {
	gobin, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Skip("go command not found: cannot list the binary's dependencies")
	}
	const pkg = "github.com/fencelock/fence/cmd/fence"
	out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	// Test machinery: the testing package, the test helpers that start servers
	// (and whose etcd member turns a test binary into an etcd server when an
	// environment variable says so), and the conformance suites.
	forbidden := []string{
		"testing",
		"github.com/fencelock/fence/internal/testserv",
		"github.com/fencelock/fence/internal/sqlguardtest",
		"github.com/fencelock/fence/internal/fencedtest",
		"github.com/fencelock/fence/internal/diskfulltest",
		"github.com/fencelock/fence/internal/watchtest",
		"github.com/fencelock/fence/fencetest",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s depends on %s, want no test machinery in the production binary", pkg, dep)
			}
		}
	}
}
