// Command inventory is the seed's inventory_snapshot as an HTTP service behind
// fence's resource middleware: writers that hold a lock send its fence with each
// write, and a writer that paused past its lease is refused (409, with the
// highest token) instead of overwriting the newer holder's snapshot.
//
//	inventory serve --postgres URL [--listen 127.0.0.1:8080]
//	fence lock inventory -- inventory put [--url URL] ID '{"apples": 3}'
//
// serve stores snapshots in the table inventory_snapshot of a PostgreSQL database,
// fenced by postgres.Guard in the same transaction as the write. put sends one
// snapshot with the fence that `fence lock` passes in FENCE_LOCK, FENCE_TOKEN and
// FENCE_LEASE. See README.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

const usage = `usage:
  inventory serve --postgres URL [--listen 127.0.0.1:8080]
  inventory put [--url http://127.0.0.1:8080] ID JSON     (run under: fence lock NAME -- ...)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args and returns the exit status: 0 ok, 1 failed, 2 usage,
// 3 a write refused because of a newer holder (stale token).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serveCmd(args[1:], stderr)
	case "put":
		return putCmd(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "inventory: unknown command %q\n%s", args[0], usage)
	return 2
}

func serveCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("inventory serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("postgres", os.Getenv("INVENTORY_POSTGRES"), "PostgreSQL URL of the database to keep snapshots in (default $INVENTORY_POSTGRES)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dsn == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, "inventory serve: --postgres is required and takes no arguments\n", usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		fmt.Fprintf(stderr, "inventory: %v\n", err)
		return 1
	}
	defer pool.Close()
	svc, err := newService(ctx, pool)
	if err != nil {
		fmt.Fprintf(stderr, "inventory: %v\n", err)
		return 1
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "inventory: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: svc.handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "inventory: listening on http://%s\n", lis.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "inventory: %v\n", err)
		return 1
	}
	return 0
}

func putCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inventory put", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "http://127.0.0.1:8080", "the inventory service")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprint(stderr, "inventory put: want ID and JSON\n", usage)
		return 2
	}
	f, err := fence.FenceFromEnv(nil)
	if err != nil {
		fmt.Fprintf(stderr, "inventory put: %v\n", err)
		return 2
	}
	status, body, err := putSnapshot(context.Background(), http.DefaultClient, *base, fs.Arg(0), []byte(fs.Arg(1)), f)
	if err != nil {
		fmt.Fprintf(stderr, "inventory put: %v\n", err)
		return 1
	}
	switch {
	case status == http.StatusOK:
		fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
		return 0
	case status == http.StatusConflict:
		fmt.Fprintf(stderr, "inventory put: refused: %s\n", strings.TrimSpace(string(body)))
		return 3
	}
	fmt.Fprintf(stderr, "inventory put: %d %s\n", status, strings.TrimSpace(string(body)))
	return 1
}

// putSnapshot sends PUT base/inventory/id with data and f's fence headers, and
// returns the answer's status and body.
func putSnapshot(ctx context.Context, hc *http.Client, base, id string, data []byte, f fence.Fence) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimRight(base, "/")+"/inventory/"+fencehttp.EscapeName(id), bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	fencehttp.SetHeaders(req, f)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}
