package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/internal/servers"
)

// TestDocs_README_RunningThreeNodes_RunsAsWritten runs the README's "Running
// three nodes" block as a reader pastes it, in bash with -e, on free ports: its
// last command, fence cluster status, must succeed and list the three nodes.
// Run at once after starting the nodes in the background, it met "connection
// refused" (the nodes were not listening yet).
func TestDocs_README_RunningThreeNodes_RunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the README's block uses curl: install it (apt-get install curl)")
	}
	block := codeBlock(t, "../../README.md", "## Running three nodes", "sh")
	// Every 127.0.0.1 port of the block moves to a free one, the same port to the
	// same free one.
	ports := map[string]string{}
	block = regexp.MustCompile(`127\.0\.0\.1:\d+`).ReplaceAllStringFunc(block, func(addr string) string {
		if p, ok := ports[addr]; ok {
			return p
		}
		port, err := servers.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[addr] = fmt.Sprintf("127.0.0.1:%d", port)
		return ports[addr]
	})
	if len(ports) != 6 {
		t.Fatalf("README.md's three-node block: want 6 addresses (3 peer, 3 API), found %d: %s", len(ports), block)
	}
	// The nodes run in the background: stop them when the block is done, as the
	// reader would.
	script := "set -e\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + block
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README.md's \"Running three nodes\" block failed: %v\noutput:\n%s", err, out)
	}
	// The status table lists each node by name.
	for _, name := range []string{"a", "b", "c"} {
		if !regexp.MustCompile(`(?m)^\s*` + name + `\s`).MatchString(string(out)) {
			t.Fatalf("README.md's block: want fence cluster status to list node %s, got:\n%s", name, out)
		}
	}
	if strings.Contains(string(out), "connection refused") {
		t.Fatalf("README.md's block: output says connection refused:\n%s", out)
	}
}
