package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binary is the product: it links no test machinery and no other
// lock library. The side-by-side benchmark, which links the peers, is its own
// command (cmd/fence-bench); programs that start throwaway servers (fence chaos)
// use internal/servers, never the test-only wrappers.
func TestBinary_LinksNoTestMachineryNorPeers(t *testing.T) {
	gobin, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Skip("go command not found: cannot list the binary's dependencies")
	}
	const pkg = "github.com/fencelock/fence/cmd/fence"
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	forbidden := []string{
		// Test machinery: the testing package, the test wrappers of the server
		// starters, and the conformance suites.
		"testing",
		"github.com/fencelock/fence/internal/servers/servertest",
		"github.com/fencelock/fence/internal/sqlguardtest",
		"github.com/fencelock/fence/internal/fencedtest",
		"github.com/fencelock/fence/internal/diskfulltest",
		"github.com/fencelock/fence/internal/watchtest",
		"github.com/fencelock/fence/fencetest",
		// The benchmark and the lock libraries it compares fence with.
		"github.com/fencelock/fence/internal/bench",
		"github.com/bsm/redislock",
		"github.com/go-redsync/redsync",
	}
	// The embedded etcd server is linked for two reasons only: cluster mode
	// (`fence serve --node`, whose node embeds a member: internal/cluster), and
	// `fence chaos --store etcd`, which runs its etcd members as this binary (the
	// hidden `fence chaos etcd-member`). fence serve --store etcd:// needs only the
	// client, so these two are the packages of the module that may import the server.
	const etcdServer = "go.etcd.io/etcd/server/"
	etcdServerImporters := map[string]bool{
		"github.com/fencelock/fence/internal/servers/etcdmember": true,
		"github.com/fencelock/fence/internal/cluster":            true,
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		dep, imports := fields[0], fields[1:]
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("%s depends on %s, want no test machinery and no other lock library in the production binary", pkg, dep)
			}
		}
		if strings.HasPrefix(dep, etcdServer) || !strings.HasPrefix(dep, "github.com/fencelock/fence") {
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, etcdServer) && !etcdServerImporters[dep] {
				t.Errorf("%s imports %s: only the chaos harness's etcd member starter may link the etcd server (see etcdServerImporters)", dep, imp)
			}
		}
	}
}
