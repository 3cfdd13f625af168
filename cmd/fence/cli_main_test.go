package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The CLI tests run the real binary, built once in TestMain, against a real
// `fence serve` (the same binary) on a free port with its own data directory.
var cli struct {
	bin   string     // the fence binary
	serve *serveProc // the shared server
	dir   string     // temp dir of the package's tests
}

func TestMain(m *testing.M) {
	code, err := cliTestMain(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// cliTestMain builds the binary and starts the shared server in a temporary
// directory, then runs the tests: it returns their exit status, or 1 and what
// failed before they could run.
func cliTestMain(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "fence-cli-test-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	cli.dir = dir
	cli.bin = filepath.Join(dir, "fence")
	build := exec.Command(filepath.Join(goroot(), "bin", "go"), "build", "-o", cli.bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("building the fence binary: %w", err)
	}
	if cli.serve, err = startServe(filepath.Join(dir, "shared-data")); err != nil {
		return 1, err
	}
	defer cli.serve.stop()
	return m.Run(), nil
}

func goroot() string {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "/usr/local/go"
}

// serveProc is a running `fence serve`.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	data string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{} // closed when the process has exited
	err  error         // its Wait error, after done
}

var listeningRE = regexp.MustCompile(`url=(\S+)`)

// startServe runs `fence serve --listen 127.0.0.1:0 --data data extra...` and waits
// for its "listening" log line.
func startServe(data string, extra ...string) (*serveProc, error) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", data}, extra...)
	p := &serveProc{cmd: exec.Command(cli.bin, args...), data: data, done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "listening") {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-found:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("fence serve exited before listening: %v\n%s", p.err, p.log())
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, fmt.Errorf("fence serve did not log that it listens within 30s:\n%s", p.log())
	}
}

func (p *serveProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop sends SIGTERM and waits for the graceful exit.
func (p *serveProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		p.kill()
		return errors.New("fence serve did not stop within 30s of SIGTERM")
	}
}

// kill sends SIGKILL (a crash) and waits for the process to be gone.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// result is a finished CLI run.
type result struct {
	stdout, stderr string
	code           int
}

// runFence runs the binary with env (added to a clean FENCE_* environment pointing at
// server) and returns its output and exit status.
func runFence(t testing.TB, server string, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli.bin, args...)
	cmd.Env = append(cleanEnv(), "FENCE_SERVER="+server)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running fence %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
}

// cleanEnv is the test's environment without FENCE_* variables, with the binary's
// directory first in PATH so children of `fence lock` can call `fence`.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FENCE_") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+filepath.Dir(cli.bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func wantCode(t testing.TB, what string, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit status %d, got %d\nstdout: %s\nstderr: %s", what, code, r.code, r.stdout, r.stderr)
	}
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
