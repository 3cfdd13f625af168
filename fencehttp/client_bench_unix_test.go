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
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
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
// pair against a real fencehttp.Server over the in-memory store in another
// process, so that cpu-ns/op (getrusage of this process: user and system, the
// garbage collector included; also apart, user-ns/op and sys-ns/op: the lean
// path saves user time, the system calls stay) and allocs/op are the client's
// alone. clients=1 is one goroutine on one lock, as each client of `fence
// bench`'s fence-serve row; clients=16 is 16 goroutines, each with a Client and
// a lock of its own, as that row's pairs/s, where pairs/s is the rate of the
// 16 together (the server's CPU and the clients' share the machine). Every
// call's answer is checked.
func BenchmarkClient_AcquireRelease(b *testing.B) {
	url := startServerProcess(b)
	ctx := context.Background()
	newClient := func(b *testing.B) *fencehttp.Client {
		c, err := fencehttp.NewClient(url, nil)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	pair := func(c *fencehttp.Client, name string) error {
		l, err := c.Acquire(ctx, name, 30*time.Second)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	b.Run("clients=1", func(b *testing.B) {
		c := newClient(b)
		for range 100 { // warm the connection and the server
			if err := pair(c, "bench/client"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		defer reportUserSys(b)()
		for range b.N {
			if err := pair(c, "bench/client"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("clients=16", func(b *testing.B) {
		const clients = 16
		cs := make(chan *fencehttp.Client, clients)
		for i := range clients {
			c := newClient(b)
			if err := pair(c, fmt.Sprintf("bench/clients/%d", i)); err != nil {
				b.Fatal(err)
			}
			cs <- c
		}
		var ids atomic.Int64
		b.ReportAllocs()
		b.SetParallelism((clients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ResetTimer()
		start := time.Now()
		defer reportUserSys(b)()
		b.RunParallel(func(pb *testing.PB) {
			var c *fencehttp.Client
			select {
			case c = <-cs:
			default:
				c = newClient(b) // more goroutines than clients (GOMAXPROCS not dividing 16)
			}
			name := fmt.Sprintf("bench/clients/%d", ids.Add(1)-1)
			for pb.Next() {
				if err := pair(c, name); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	})
}

// reportUserSys is reportCPU with the user and system times also apart.
func reportUserSys(b *testing.B) func() {
	u0, s0 := userSys(b)
	return func() {
		u1, s1 := userSys(b)
		b.ReportMetric(float64(u1-u0+s1-s0)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(u1-u0)/float64(b.N), "user-ns/op")
		b.ReportMetric(float64(s1-s0)/float64(b.N), "sys-ns/op")
	}
}

func userSys(b *testing.B) (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
