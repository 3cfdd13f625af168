package servers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Redis is a throwaway redis-server on 127.0.0.1 (or the Host of RedisOptions). Its
// fields are fixed for its whole life, across Kill and Restart.
type Redis struct {
	Addr string // "HOST:PORT"
	Host string // the address it binds: "127.0.0.1" unless RedisOptions.Host
	Port int
	Dir  string // the server's working directory (RDB and AOF files), removed by Close

	bin     string
	args    []string                                   // extra config from the caller
	command func(bin string, args ...string) *exec.Cmd // RedisOptions.Command; nil: exec.Command

	life Lifecycle
}

// RedisOptions places a redis-server somewhere other than this machine's loopback:
// the chaos harness runs its servers in network namespaces of their own.
type RedisOptions struct {
	// Host is the IPv4 address to bind and to reach the server at; "" means 127.0.0.1.
	Host string
	// Command, if not nil, makes the server's command (e.g. one that runs bin in a
	// network namespace); the process attributes, directory and log are set here.
	Command func(bin string, args ...string) *exec.Cmd
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 with a fresh temporary
// directory, no RDB snapshots and no AOF, and waits until it answers PING. args are extra
// redis-server config that override the defaults, e.g. "--appendonly", "yes" or
// "--replicaof", "127.0.0.1", "6380". The caller must Close it. It returns an error
// matching ErrNotFound if redis-server is not installed, or one with the tail of the
// server's log if it does not start.
func StartRedis(args ...string) (*Redis, error) { return StartRedisWith(RedisOptions{}, args...) }

// StartRedisWith is StartRedis with the server placed as o says. It returns the
// errors of StartRedis.
func StartRedisWith(o RedisOptions, args ...string) (*Redis, error) {
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	bin, err := FindBinary("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := MakeDir("redis")
	if err != nil {
		return nil, err
	}
	s := &Redis{Host: host, Dir: dir, bin: bin, args: append([]string(nil), args...), command: o.Command}
	s.life.Dir = dir
	s.life.Launch = s.launch
	s.life.StopSig = syscall.SIGTERM // it saves if persistence is on
	setPort := func(port int) {
		s.Port = port
		s.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	}
	if err := StartOnFreePort(setPort, s.life.Start, nil); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// StartRedisReplica starts a redis-server replicating primary (with args as for
// StartRedis) and waits until the replication link is up and the initial sync is done.
// The caller must Close it.
func StartRedisReplica(primary *Redis, args ...string) (*Redis, error) {
	return StartRedisReplicaWith(RedisOptions{}, primary, args...)
}

// StartRedisReplicaWith is StartRedisReplica with the replica placed as o says. It
// returns the errors of StartRedisReplica.
func StartRedisReplicaWith(o RedisOptions, primary *Redis, args ...string) (*Redis, error) {
	all := append([]string{"--replicaof", primary.Host, strconv.Itoa(primary.Port)}, args...)
	s, err := StartRedisWith(o, all...)
	if err != nil {
		return nil, err
	}
	if err := s.WaitReplicaSynced(StartTimeout); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// launch starts redis-server on s.Port and waits until it answers PING.
func (s *Redis) launch() (*Process, error) {
	args := []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", s.Host,
		"--dir", s.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", "", // stdout, which goes to the log file
		// A primary would otherwise wait 5s for more replicas before a full sync.
		"--repl-diskless-sync-delay", "0",
	}
	args = append(args, s.args...)
	logPath := filepath.Join(s.Dir, "redis.log")
	if s.command == nil {
		return Launch("redis-server", s.bin, args, logPath, nil, s.ping)
	}
	cmd := s.command(s.bin, args...)
	cmd.Dir = s.Dir
	p, err := StartCommand("redis-server", cmd, logPath)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(s.ping); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// ping checks that the server answers PING (a NOAUTH error counts: it is up).
func (s *Redis) ping() error {
	reply, err := s.Do("PING")
	if err != nil && strings.HasPrefix(err.Error(), "servers: redis: NOAUTH") {
		return nil
	}
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("servers: redis: PING answered %q", reply)
	}
	return nil
}

// Do sends one command on a fresh connection and returns its reply: the text of a simple
// string, bulk string or integer reply, or the elements of an array reply joined by
// newlines. A Redis error reply is returned as an error with its text; a nil reply is ""
// and nil. It is meant for setup and fault injection (CONFIG SET, DEBUG, INFO, REPLICAOF), not for speed.
func (s *Redis) Do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("servers: redis: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", fmt.Errorf("servers: redis: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", fmt.Errorf("servers: redis: %s: %w", args[0], err)
	}
	return readRESP(bufio.NewReader(conn))
}

// readRESP reads one RESP2 reply.
func readRESP(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("servers: redis: read reply: %w", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("servers: redis: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("servers: redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("servers: redis: bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("servers: redis: read bulk: %w", err)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("servers: redis: bad array length %q", line)
		}
		elems := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			e, err := readRESP(r)
			if err != nil {
				return "", err
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, "\n"), nil
	default:
		return "", fmt.Errorf("servers: redis: unexpected reply %q", line)
	}
}

// WaitReplicaSynced waits up to timeout until this server, a replica, reports its link to
// the primary up and no sync in progress. It returns an error saying the last status
// otherwise.
func (s *Redis) WaitReplicaSynced(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		info, err := s.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") &&
			strings.Contains(info, "master_sync_in_progress:0") {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = info
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("servers: redis %s: replica not synced after %v; INFO replication: %s; log:\n%s",
				s.Addr, timeout, last, LogTail(filepath.Join(s.Dir, "redis.log")))
		}
		<-tick.C
	}
}

// CLI runs redis-cli against the server with args (e.g. "SET", "k", "v") and returns its
// trimmed output. It returns an error with the output if redis-cli fails or is missing
// (apt-get install redis-tools). Redis error replies come back in the output, as
// redis-cli prints them, e.g. "ERR unknown command".
func (s *Redis) CLI(args ...string) (string, error) {
	bin, err := FindBinary("redis-cli", "redis-tools")
	if err != nil {
		return "", err
	}
	all := append([]string{"-h", s.Host, "-p", strconv.Itoa(s.Port)}, args...)
	out, err := exec.Command(bin, all...).CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return text, fmt.Errorf("servers: redis-cli %s: %w: %s", strings.Join(args, " "), err, text)
	}
	return text, nil
}

// Kill stops the server with SIGKILL, like a crash: nothing is saved on the way down.
// The port and directory are kept for Restart. Killing a killed server does nothing.
func (s *Redis) Kill() { s.life.Kill() }

// Stop shuts the server down gracefully (SIGTERM: it saves if persistence is on) and
// keeps the port and directory for Restart.
func (s *Redis) Stop() { s.life.Stop() }

// Restart stops the server if it runs (gracefully, SIGTERM) and starts it again on the
// same port with the same directory and args, so it reloads whatever it persisted. After
// Kill it starts the server again. It returns an error with the log's tail if the server
// does not come back, or if it was closed.
func (s *Redis) Restart() error { return s.life.Restart("redis " + s.Addr) }

// Close kills the server and removes its directory. It is safe to call more than once.
func (s *Redis) Close() { s.life.Close() }
