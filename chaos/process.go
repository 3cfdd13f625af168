package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fence"
)

// server is the `fence serve` child process, restartable on the same port and data.
type server struct {
	bin, addr, data, logPath string
	store                    string // --store URL; "" means the embedded bolt store in data
	mu                       sync.Mutex
	cmd                      *exec.Cmd
	exited                   chan struct{}
}

func (s *server) url() string { return "http://" + s.addr }

func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: server log: %w", err)
	}
	cmd := exec.Command(s.bin, "serve", "--listen", s.addr, "--data", s.data, "--log-level", "warn", "--shutdown-timeout", "2s")
	if s.store != "" {
		cmd.Args = append(cmd.Args, "--store", s.store)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start fence serve: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	// Wait until it serves.
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := healthClient.Get(s.url() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("chaos: fence serve exited at start (see %s)", s.logPath)
		case <-ctx.Done():
			return fmt.Errorf("chaos: waiting for fence serve: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: fence serve not healthy after 15s (see %s)", s.logPath)
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// stop shuts the server down gracefully (SIGTERM), killing it after 5s.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// healthClient polls /healthz; a server stopped mid-answer must not hang the poll.
var healthClient = &http.Client{Timeout: time.Second}

// freeAddr returns 127.0.0.1:PORT with a port free at the time of the call.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("chaos: free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// worker is one worker process and what the harness learnt from its log so far.
type worker struct {
	id      int
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	mu      sync.Mutex
	off     int64
	ops     int
	acq     int
	token   fence.Token // token of its latest acquisition
	paused  bool
}

// tail reads the new complete lines of the worker's log and updates its counters.
func (w *worker) tail() {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.Open(w.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.off, io.SeekStart); err != nil {
		return
	}
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return // a partial line is read again next time
		}
		w.off += int64(len(line))
		var o Op
		if json.Unmarshal(line, &o) != nil {
			continue
		}
		w.ops++
		if o.Kind == KindAcquire && o.Result == ResultOK {
			w.acq++
			w.token = o.Token
		}
	}
}
