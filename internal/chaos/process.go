package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/servers"
)

// server is the `fence serve` child process, restartable on the same port and data.
type server struct {
	bin, addr, data, logPath string
	store                    string   // --store URL; "" means the embedded bolt store in data
	flags                    []string // further flags of fence serve, e.g. --external-locks
	env                      []string // extra environment of the process ("K=V"), e.g. its fault clock
	// command makes its command (the run's, for its host); nil means exec.Command.
	command func(bin string, args ...string) *exec.Cmd
	life    servers.Lifecycle
}

func (s *server) url() string { return "http://" + s.addr }

// newServer returns the server of bin (the fence binary) on addr with its data and
// log, not started.
func newServer(bin, addr, data, logPath string) *server {
	s := &server{bin: bin, addr: addr, data: data, logPath: logPath}
	s.life.Launch = s.launch
	s.life.StopSig = syscall.SIGTERM // a graceful shutdown
	return s
}

// launch starts fence serve and waits until it is healthy.
func (s *server) launch() (*servers.Process, error) {
	command := s.command
	if command == nil {
		command = exec.Command
	}
	cmd := command(s.bin, "serve", "--listen", s.addr, "--data", s.data, "--log-level", "warn", "--shutdown-timeout", "2s")
	if s.store != "" {
		cmd.Args = append(cmd.Args, "--store", s.store)
	}
	cmd.Args = append(cmd.Args, s.flags...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	p, err := servers.StartCommand("fence serve", cmd, s.logPath)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	if err := p.WaitReady(s.healthy); err != nil {
		p.Kill()
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return p, nil
}

// healthy asks fence serve's /healthz.
func (s *server) healthy() error {
	resp, err := healthClient.Get(s.url() + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s", resp.Status)
	}
	return nil
}

// start starts fence serve and waits until it is healthy. It returns an error with
// the tail of its log if it exits or is not healthy within servers.StartTimeout.
func (s *server) start() error { return s.life.Start() }

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() { s.life.Kill() }

// stop shuts the server down gracefully (SIGTERM), killing it after
// servers.StopTimeout.
func (s *server) stop() { s.life.Stop() }

// healthClient polls /healthz; a server stopped mid-answer must not hang the poll.
var healthClient = &http.Client{Timeout: time.Second}

// freeAddr returns host:PORT with a port of 127.0.0.1 free at the time of the call
// (host is 127.0.0.1, or a host in a fresh namespace, where every port is free).
func freeAddr(host string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("chaos: free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
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
	// critical: its latest recorded operations are a successful acquisition and then
	// only its fence and its read: it is inside its critical section.
	critical bool
	paused   bool
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
		switch o.Kind {
		case KindAcquire:
			w.critical = o.Result == ResultOK
		case KindFence, KindRead:
			w.critical = w.critical && o.Result == ResultOK
		default:
			w.critical = false
		}
	}
}
