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
	"github.com/fencelock/fence/internal/servers"
)

// server is the `fence serve` child process, restartable on the same port and data.
type server struct {
	bin, addr, data, logPath string
	store                    string // --store URL; "" means the embedded bolt store in data
	mu                       sync.Mutex
	proc                     *servers.Process // nil before start and after kill or stop
}

func (s *server) url() string { return "http://" + s.addr }

// start starts fence serve and waits until it is healthy; if it is not within 15s
// (or ctx ends first), it kills it and returns an error naming the log.
func (s *server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, "serve", "--listen", s.addr, "--data", s.data, "--log-level", "warn", "--shutdown-timeout", "2s")
	if s.store != "" {
		cmd.Args = append(cmd.Args, "--store", s.store)
	}
	p, err := servers.StartCommand("fence serve", cmd, s.logPath)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	s.proc = p
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
		if p.Exited() {
			return fmt.Errorf("chaos: fence serve exited at start (see %s)", s.logPath)
		}
		select {
		case <-ctx.Done():
			s.killLocked()
			return fmt.Errorf("chaos: waiting for fence serve: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("chaos: fence serve not healthy after 15s (see %s)", s.logPath)
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *server) killLocked() {
	if s.proc != nil {
		s.proc.Kill()
		s.proc = nil
	}
}

// stop shuts the server down gracefully (SIGTERM), killing it after
// servers.StopTimeout.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Stop(syscall.SIGTERM)
		s.proc = nil
	}
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
	proc    *servers.Process // nil before start and after stopWorkers
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
