// Package packaging holds the files that install fence serve (a container image
// definition and a systemd unit) and the tests that check them with what runs on
// the machine: systemd-analyze for the unit, a static CGO_ENABLED=0 build and the
// image's own command for the Containerfile, and an image build when a container
// daemon answers.
package packaging

import (
	"bufio"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	unitFile        = "fence.service"
	containerfile   = "Containerfile"
	installedBinary = "/usr/local/bin/fence"
)

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string
)

// TestMain removes the binary built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// staticFence builds cmd/fence once with CGO_ENABLED=0, as the Containerfile does.
func staticFence(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "fence-packaging-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "fence")
		// A bound for a hung build, not a speed check: CGO_ENABLED=0 shares no
		// build cache with the race-built tests, so this compiles every package
		// (the etcd server among them) again, which took over 5 minutes on a
		// loaded 2-core machine.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-buildvcs=false", "-o", buildBin, "./cmd/fence")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("CGO_ENABLED=0 go build ./cmd/fence: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// unitSettings parses a unit file into its [Service] (and other) settings, by
// "Section.Key", in order; continuation lines are joined.
func unitSettings(t *testing.T, text string) map[string][]string {
	t.Helper()
	out := make(map[string][]string)
	section, pending := "", ""
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if pending != "" {
			line = pending + " " + line
			pending = ""
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending = strings.TrimSuffix(line, "\\")
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is neither a section nor a setting", unitFile, line)
		}
		out[section+"."+k] = append(out[section+"."+k], v)
	}
	return out
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUnit_Settings(t *testing.T) {
	s := unitSettings(t, readFile(t, unitFile))
	want := map[string]string{
		"Service.Restart":         "on-failure",
		"Service.StateDirectory":  "fence",
		"Service.DynamicUser":     "yes",
		"Service.KillSignal":      "SIGTERM",
		"Service.ProtectSystem":   "strict",
		"Service.NoNewPrivileges": "yes",
		"Install.WantedBy":        "multi-user.target",
	}
	for k, v := range want {
		if got := s[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s: want %s=%s, got %q", unitFile, k, v, got)
		}
	}
	exec := s["Service.ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("%s: want one ExecStart, got %q", unitFile, exec)
	}
	if f := strings.Fields(exec[0]); len(f) < 2 || f[0] != installedBinary || f[1] != "serve" {
		t.Errorf("%s: ExecStart: want %s serve ..., got %q", unitFile, installedBinary, exec[0])
	}
	if !regexp.MustCompile(`--data /var/lib/fence(\s|$)`).MatchString(exec[0]) {
		t.Errorf("%s: ExecStart: want --data /var/lib/fence (the StateDirectory), got %q", unitFile, exec[0])
	}
	// The stop timeout must outlast fence's own graceful shutdown (30s by default),
	// or systemd kills it while it still finishes requests.
	stop := s["Service.TimeoutStopSec"]
	if len(stop) != 1 {
		t.Fatalf("%s: want one TimeoutStopSec, got %q", unitFile, stop)
	}
	d, err := time.ParseDuration(stop[0])
	if err != nil || d <= 30*time.Second {
		t.Errorf("%s: TimeoutStopSec: want a duration over 30s (fence's --shutdown-timeout), got %q", unitFile, stop[0])
	}
}

// verifiable writes the unit to a temp dir with ExecStart pointing at a built
// binary: systemd-analyze verify refuses a unit whose ExecStart does not exist.
func verifiable(t *testing.T) string {
	t.Helper()
	text := readFile(t, unitFile)
	if !strings.Contains(text, "ExecStart="+installedBinary+" ") {
		t.Fatalf("%s: no ExecStart=%s to point at the built binary", unitFile, installedBinary)
	}
	text = strings.ReplaceAll(text, "ExecStart="+installedBinary+" ", "ExecStart="+staticFence(t)+" ")
	path := filepath.Join(t.TempDir(), unitFile)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if testing.Short() {
			t.Skip("-short: systemd-analyze is not installed")
		}
		t.Fatal("systemd-analyze is not installed: apt-get install systemd (scripts/install-deps.sh does)")
	}
	return p
}

func TestUnit_Verify(t *testing.T) {
	sa := systemdAnalyze(t)
	path := verifiable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, sa, "verify", "--man=no", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	// verify exits 0 on unknown or misspelt settings, and only says so.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, path) || strings.Contains(line, unitFile) {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}

func TestUnit_Security(t *testing.T) {
	sa := systemdAnalyze(t)
	path := verifiable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --threshold is in tenths of the printed level: 20 is an exposure of 2.0 at most
	// ("OK"; an unsandboxed service is 9.6).
	out, err := exec.CommandContext(ctx, sa, "security", "--offline=yes", "--threshold=20", "--no-pager", path).CombinedOutput()
	level := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if strings.Contains(string(out), "Unknown option") || (err != nil && level == nil) {
		t.Skipf("this systemd-analyze cannot score a unit file offline: %v\n%s", err, out)
	}
	if err != nil {
		t.Fatalf("systemd-analyze security: want an exposure of 2.0 at most, got %s: %v", level[1], err)
	}
	t.Logf("exposure level: %s", level[1])
}

// serve runs bin with args and waits for its "listening" line; it returns the
// process and its log so far, or fails the test.
func serve(t *testing.T, bin string, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var mu sync.Mutex
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "listening") {
				once.Do(func() { close(found) })
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	select {
	case <-found:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s %s: no \"listening\" line within 30s:\n%s", bin, strings.Join(args, " "), log.String())
	}
	return cmd, &log
}

// withLocal replaces the value of --listen with a free local port, of --data
// with a temp dir and of --auth-token-file (a secret mounted in the container)
// with a token file of its own, so that a packaged command line runs here as
// it is otherwise.
func withLocal(t *testing.T, args []string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	seen := map[string]bool{}
	for i := 0; i+1 < len(out); i++ {
		switch out[i] {
		case "--listen":
			out[i+1] = "127.0.0.1:0"
			seen["--listen"] = true
		case "--data":
			out[i+1] = t.TempDir()
			seen["--data"] = true
		case "--auth-token-file":
			out[i+1] = filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(out[i+1], []byte("packaging-test-token\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !seen["--listen"] || !seen["--data"] {
		t.Fatalf("command %q: want --listen and --data", args)
	}
	return out
}

// stopCleanly sends SIGTERM (the unit's KillSignal, the image's STOPSIGNAL) and
// wants exit status 0 within limit.
func stopCleanly(t *testing.T, cmd *exec.Cmd, log *strings.Builder, limit time.Duration) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after SIGTERM: want exit 0, got %v\n%s", err, log.String())
		}
	case <-time.After(limit):
		t.Fatalf("after SIGTERM: still running after %v", limit)
	}
}

// The unit's ExecStart, run as it is but on a free port and a temp dir, serves and
// stops cleanly on the unit's KillSignal.
func TestUnit_ExecStartServes(t *testing.T) {
	s := unitSettings(t, readFile(t, unitFile))
	f := strings.Fields(s["Service.ExecStart"][0])
	cmd, log := serve(t, staticFence(t), withLocal(t, f[1:])...)
	stopCleanly(t, cmd, log, 30*time.Second)
}

// instr is one instruction of a Containerfile.
type instr struct{ op, args string }

// containerfileInstrs parses a Containerfile into its instructions, in order,
// with continuation lines joined.
func containerfileInstrs(t *testing.T) []instr {
	t.Helper()
	var out []instr
	pending := ""
	for _, raw := range strings.Split(readFile(t, containerfile), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if pending != "" {
			line = pending + " " + line
		}
		if strings.HasSuffix(line, "\\") {
			pending = strings.TrimSuffix(line, "\\")
			continue
		}
		pending = ""
		if line == "" {
			continue
		}
		op, args, _ := strings.Cut(line, " ")
		out = append(out, instr{strings.ToUpper(op), strings.TrimSpace(args)})
	}
	return out
}

func jsonArgs(t *testing.T, in instr) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("%s: %s %s: want the JSON (exec) form: %v", containerfile, in.op, in.args, err)
	}
	return v
}

func TestContainerfile_Static(t *testing.T) {
	ins := containerfileInstrs(t)
	var stages [][]instr
	for _, in := range ins {
		if in.op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%s: want a multi-stage build, got %d stage(s)", containerfile, len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	var cgo0, user, volume, entry, cmd, copied bool
	var entrypoint, command []string
	for _, in := range build {
		switch in.op {
		case "RUN":
			if strings.Contains(in.args, "go build") && strings.Contains(in.args, "CGO_ENABLED=0") {
				cgo0 = true
			}
		case "COPY":
			// Sources of the build stage are paths of the repo (the build context).
			for _, src := range strings.Fields(in.args)[:len(strings.Fields(in.args))-1] {
				if strings.HasPrefix(src, "--") {
					continue
				}
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("%s: COPY %s: not in the repo: %v", containerfile, src, err)
				}
			}
		}
	}
	if m := regexp.MustCompile(`-o /out/fence ([./\w-]+)`).FindStringSubmatch(readFile(t, containerfile)); m == nil {
		t.Errorf("%s: no go build -o /out/fence PACKAGE", containerfile)
	} else if _, err := os.Stat(filepath.Join("..", m[1], "main.go")); err != nil {
		t.Errorf("%s: builds %s, which has no main.go: %v", containerfile, m[1], err)
	}
	for _, in := range final {
		switch in.op {
		case "USER":
			u, _, _ := strings.Cut(in.args, ":")
			if n, err := strconv.Atoi(u); (err == nil && n == 0) || u == "root" {
				t.Errorf("%s: USER %s: want a non-root user", containerfile, in.args)
			}
			user = true
		case "VOLUME":
			volume = strings.Contains(in.args, `"/data"`) || strings.Fields(in.args)[0] == "/data"
		case "ENTRYPOINT":
			entrypoint, entry = jsonArgs(t, in), true
		case "CMD":
			command, cmd = jsonArgs(t, in), true
		case "COPY":
			if strings.Contains(in.args, "/out/fence ") && strings.HasSuffix(in.args, " "+installedBinary) {
				copied = true
			}
		}
	}
	if !cgo0 {
		t.Errorf("%s: the build stage must build with CGO_ENABLED=0 (a static binary)", containerfile)
	}
	if !user || !volume || !entry || !cmd || !copied {
		t.Fatalf("%s: final stage: want USER (non-root) %v, VOLUME /data %v, ENTRYPOINT %v, CMD %v, the binary copied to %s %v",
			containerfile, user, volume, entry, cmd, installedBinary, copied)
	}
	if want := []string{installedBinary}; strings.Join(entrypoint, " ") != strings.Join(want, " ") {
		t.Errorf("%s: ENTRYPOINT: want %q, got %q", containerfile, want, entrypoint)
	}
	if want := "serve --listen 0.0.0.0:7420 --data /data --auth-token-file " + tokenSecret; strings.Join(command, " ") != want {
		t.Errorf("%s: CMD: want %q (beyond loopback, so with the mounted token secret), got %q", containerfile, want, command)
	}

	// The binary as the image has it: static, and its --version and CMD work.
	bin := staticFence(t)
	if err := checkStatic(bin); err != nil {
		t.Fatalf("CGO_ENABLED=0 build: %v", err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "fence ") {
		t.Fatalf("fence --version: want \"fence VERSION\", got %q, %v", out, err)
	}
	proc, log := serve(t, bin, withLocal(t, command)...)
	stopCleanly(t, proc, log, 30*time.Second)
	refusedBeforeListening(t, bin, command)
}

// tokenSecret is where the image's command reads its auth tokens: a secret
// mounted into the container (packaging/README.md).
const tokenSecret = "/run/secrets/fence-token"

// refusedBeforeListening runs the image's command with its --listen beyond
// loopback as it is: without the token secret mounted, and with the token flag
// dropped, fence serve must exit 2 naming the way out, before it listens or
// makes its data directory (P12: the image is closed by default).
func refusedBeforeListening(t *testing.T, bin string, command []string) {
	t.Helper()
	if _, err := os.Stat(tokenSecret); err == nil {
		t.Logf("%s exists on this machine: the command would serve on 0.0.0.0; not run without its secret", tokenSecret)
		return
	}
	var noFlag []string
	for i := 0; i < len(command); i++ {
		if command[i] == "--auth-token-file" {
			i++
			continue
		}
		noFlag = append(noFlag, command[i])
	}
	for _, tc := range []struct {
		what string
		args []string
		want string
	}{
		{"without the secret mounted", command, "--auth-token-file"},
		{"without --auth-token-file", noFlag, "--allow-no-auth"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		args := append([]string(nil), tc.args...)
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "--data" {
				args[i+1] = data
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "listening") {
			t.Errorf("the image's command %s (%q): got %v, %q; want exit 2 naming %s, before listening", tc.what, args, err, out, tc.want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("the image's command %s made its data directory before it was refused: %v", tc.what, err)
		}
	}
}

// checkStatic returns an error if the ELF file at path needs a dynamic loader or
// shared libraries (which the distroless static base does not have).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("it has a dynamic loader (PT_INTERP): not static")
		}
	}
	libs, err := f.ImportedLibraries()
	if err == nil && len(libs) > 0 {
		return fmt.Errorf("it needs shared libraries %v: not static", libs)
	}
	return nil
}

// The image itself, when a container daemon answers: built from the repo root, and
// its binary runs. Without a daemon (a docker client alone) the test says so and
// skips; TestContainerfile_Static checks what can be checked without one.
func TestContainerfile_Build(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker client: cannot build the image")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	info, err := exec.CommandContext(ctx, docker, "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	cancel()
	if err != nil {
		t.Skipf("no container daemon answers (docker info: %v: %s): cannot build the image here", err, firstLine(info))
	}
	if testing.Short() {
		t.Skip("-short: the image build downloads base images and takes minutes")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	tag := "fence-packaging-test:" + hex.EncodeToString(b[:])
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, docker, "build", "-f", "packaging/"+containerfile, "-t", tag, ".")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })
	out, err := exec.CommandContext(ctx, docker, "run", "--rm", tag, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "fence ") {
		t.Fatalf("docker run %s --version: want \"fence VERSION\", got %q, %v", tag, out, err)
	}
	out, err = exec.CommandContext(ctx, docker, "image", "inspect", "--format", "{{.Config.User}}", tag).Output()
	if u := strings.TrimSpace(string(out)); err != nil || u == "" || u == "0" || strings.HasPrefix(u, "root") || strings.HasPrefix(u, "0:") {
		t.Fatalf("image user: want non-root, got %q, %v", u, err)
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
