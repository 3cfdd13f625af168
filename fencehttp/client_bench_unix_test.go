//go:build unix

package fencehttp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/inmem"
)

// benchServeEnv makes the test binary a fence server over the in-memory store
// for BenchmarkClient_AcquireRelease: it prints its URL and serves until its
// standard input closes (the benchmark ends, or dies).
const benchServeEnv = "FENCEHTTP_BENCH_SERVE"

func init() {
	if os.Getenv(benchServeEnv) != "1" {
		return
	}
	s, err := fencehttp.NewServer(fencehttp.Config{Locker: inmem.NewLocker(inmem.Options{})})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, s.Handler()) }()
	fmt.Printf("http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startServerProcess starts the test binary as a fence server of its own
// (benchServeEnv) and returns its URL: the process running the benchmark is
// then the client alone, and its CPU time the client's.
func startServerProcess(b *testing.B) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServeEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		b.Fatalf("server process: want its URL, got %q (%v)", line, err)
	}
	return strings.TrimSpace(line)
}

// BenchmarkClient_AcquireRelease: the Client's own cost of an acquire+release
// pair (one goroutine, one lock, as each client process of `fence bench`'s
// fence-serve row) against a real fencehttp.Server over the in-memory store in
// another process, so that cpu-ns/op (getrusage of this process: user and
// system, the garbage collector included) and allocs/op are the client's
// alone. Every call's answer is checked.
func BenchmarkClient_AcquireRelease(b *testing.B) {
	c, err := fencehttp.NewClient(startServerProcess(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range 100 { // warm the connection and the server
		l, err := c.Acquire(ctx, "bench/client", 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for range b.N {
		l, err := c.Acquire(ctx, "bench/client", 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
