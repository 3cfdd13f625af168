//go:build unix

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencelock/fence"
)

// config is the demo's configuration (the command line).
type config struct {
	DSN        string
	TTL        time.Duration // the election's term TTL
	Every      time.Duration // a job per tick while leading
	PauseAfter int           // jobs node-1 writes before it is paused
	Pause      time.Duration // shortest pause of node-1, at least TTL
	After      int           // jobs node-2 writes after node-1's refusal before the demo stops
	Log        io.Writer     // the instances' logs go here when set
}

// validate returns an error naming the first bad setting.
func (c config) validate() error {
	switch {
	case c.DSN == "":
		return errors.New("scheduler: no database: pass --postgres DSN (or set SCHEDULER_POSTGRES), e.g. postgres://postgres@127.0.0.1:5432/scheduler?sslmode=disable")
	case c.TTL < 500*time.Millisecond || c.TTL > 10*time.Minute:
		return fmt.Errorf("scheduler: --ttl %v: want 500ms to 10m", c.TTL)
	case c.Every < 10*time.Millisecond || c.Every > c.TTL:
		return fmt.Errorf("scheduler: --every %v: want 10ms to the TTL (%v)", c.Every, c.TTL)
	case c.PauseAfter < 1 || c.PauseAfter > 1000:
		return fmt.Errorf("scheduler: --pause-after %d: want 1 to 1000 jobs", c.PauseAfter)
	case c.Pause < c.TTL || c.Pause > 10*time.Minute:
		return fmt.Errorf("scheduler: --pause %v: want the TTL (%v) to 10m: a shorter stop is no pause past the term", c.Pause, c.TTL)
	case c.After < 1 || c.After > 1000:
		return fmt.Errorf("scheduler: --after %d: want 1 to 1000 jobs", c.After)
	}
	return nil
}

// entry is one line of the timeline: something an instance reported, or did
// to it, as the coordinator saw it.
type entry struct {
	At       time.Duration // since the demo started
	Instance string
	What     string
}

// jobRow is one recorded job.
type jobRow struct {
	Job      int64
	Instance string
	Epoch    fence.Token
}

// result is what one demo run produced.
type result struct {
	Run      string
	Timeline []entry
	First    fence.Token   // node-1's epoch
	Second   fence.Token   // node-2's epoch, after the takeover
	Takeover time.Duration // from node-1's SIGSTOP to node-2 leading
	Paused   time.Duration // from node-1's SIGSTOP to its SIGCONT
	Refused  *event        // node-1's write on waking, refused by the guard
	// Late counts node-1's writes admitted after it resumed: a guard that
	// let a deposed leader write. Always 0 with fencing.
	Late int
	Jobs []jobRow // the run's recorded jobs, in job order
}

// run is the demo: node-1 and node-2 campaign for one election; node-1 leads
// and records jobs; before its write number PauseAfter+1 it is stopped with
// SIGSTOP, node-2 takes over after the term's TTL and records the following
// jobs; node-1 is resumed (SIGCONT) and its write, carrying its old epoch, is
// refused by the guard. It returns the timeline and the recorded jobs.
func run(cfg config) (res result, err error) {
	res.Run = fmt.Sprintf("demo-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+4*cfg.Pause+time.Duration(cfg.PauseAfter+cfg.After)*cfg.Every)
	defer cancel()
	pool, err := pgxpool.New(ctx, cfg.DSN)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		return res, fmt.Errorf("scheduler: connect to the database: %w", err)
	}
	defer pool.Close()
	if err := createSchema(ctx, pool); err != nil {
		return res, err
	}
	exe, err := os.Executable()
	if err != nil {
		return res, fmt.Errorf("scheduler: find own executable to start instances: %w", err)
	}

	d := &demo{start: time.Now(), res: &res, events: make(chan timedEvent, 256), quit: make(chan struct{}), ctx: ctx}
	defer d.stopAll()
	// Events are stamped when they come and recorded when the coordinator reads
	// them, after its own actions in between: put the timeline in time order.
	defer func() { slices.SortStableFunc(res.Timeline, func(a, b entry) int { return cmp.Compare(a.At, b.At) }) }()
	base := instanceConfig{DSN: cfg.DSN, Run: res.Run, TTL: cfg.TTL, Every: cfg.Every}
	n1cfg, n2cfg := base, base
	n1cfg.Name, n1cfg.HoldAfter = "node-1", cfg.PauseAfter
	n2cfg.Name = "node-2"

	// node-1 first, so that it leads; node-2 once it does.
	n1, err := d.startChild(exe, n1cfg, cfg.Log)
	if err != nil {
		return res, err
	}
	ev, err := d.await("node-1 to lead", 30*time.Second, is("node-1", "leading"))
	if err != nil {
		return res, err
	}
	res.First = ev.Epoch
	n2, err := d.startChild(exe, n2cfg, cfg.Log)
	if err != nil {
		return res, err
	}
	if _, err := d.await("node-1 to be about to write", 30*time.Second+time.Duration(cfg.PauseAfter+1)*cfg.Every, is("node-1", "holding")); err != nil {
		return res, err
	}

	// The pause: node-1 is frozen with its write decided and not yet sent.
	if err := n1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return res, fmt.Errorf("scheduler: pause node-1: %w", err)
	}
	pausedAt := time.Now()
	d.note("node-1", "paused (SIGSTOP) while about to write its next job")
	ev, err = d.await("node-2 to take over", cfg.TTL+30*time.Second, is("node-2", "leading"))
	if err != nil {
		return res, err
	}
	res.Second, res.Takeover = ev.Epoch, time.Since(pausedAt)
	if _, err := d.await("node-2 to write", 30*time.Second, is("node-2", "wrote")); err != nil {
		return res, err
	}
	if rest := cfg.Pause - time.Since(pausedAt); rest > 0 {
		time.Sleep(rest)
	}
	if err := n1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return res, fmt.Errorf("scheduler: resume node-1: %w", err)
	}
	res.Paused = time.Since(pausedAt)
	d.resumed = true
	d.note("node-1", fmt.Sprintf("resumed (SIGCONT) after %v", res.Paused.Round(10*time.Millisecond)))
	// Only now let it go on: a line sent before could be read in the moment
	// before the stop lands, and the write would beat the pause.
	if _, err := io.WriteString(n1.stdin, "go\n"); err != nil {
		return res, fmt.Errorf("scheduler: node-1: %w", err)
	}

	ev, err = d.await("node-1's write on waking", 30*time.Second, is("node-1", "refused"))
	if err != nil {
		return res, err
	}
	res.Refused = &ev
	if _, err := d.await("node-1 to stop leading", 30*time.Second, is("node-1", "stopped")); err != nil {
		return res, err
	}
	for i := 0; i < cfg.After; i++ {
		if _, err := d.await("node-2's next jobs", 30*time.Second, is("node-2", "wrote")); err != nil {
			return res, err
		}
	}

	// node-1 first: stopped together, node-1 could win node-2's resigned term
	// in the moment before its own signal is handled.
	for _, c := range []*child{n1, n2} {
		d.note(c.name, "stopping (SIGTERM)")
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if err := d.awaitExit(c, 30*time.Second); err != nil {
			return res, err
		}
	}
	rows, err := pool.Query(ctx, `SELECT job, instance, epoch FROM scheduler_jobs WHERE run_id = $1 ORDER BY job, written_at`, res.Run)
	if err != nil {
		return res, fmt.Errorf("scheduler: read the jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r jobRow
		var epoch int64
		if err := rows.Scan(&r.Job, &r.Instance, &epoch); err != nil {
			return res, fmt.Errorf("scheduler: read the jobs: %w", err)
		}
		r.Epoch = fence.Token(epoch)
		res.Jobs = append(res.Jobs, r)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("scheduler: read the jobs: %w", err)
	}
	return res, nil
}

// demo is a run's coordinator state: its children and their merged events.
type demo struct {
	ctx      context.Context
	start    time.Time
	res      *result
	children []*child
	events   chan timedEvent // from every child, in the order they came
	quit     chan struct{}   // closed by stopAll: nobody reads events any more
	resumed  bool            // node-1 was resumed: its writes from now on are late
}

type timedEvent struct {
	at time.Time
	ev event
}

// child is one instance process.
type child struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  bytes.Buffer  // read only after exited
	exited  chan struct{} // closed once the process was waited for
	waitErr error
}

// startChild re-executes the program as the instance cfg.
func (d *demo) startChild(exe string, cfg instanceConfig, logw io.Writer) (*child, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %s: encode config: %w", cfg.Name, err)
	}
	c := &child{name: cfg.Name, exited: make(chan struct{})}
	c.cmd = exec.CommandContext(d.ctx, exe)
	c.cmd.Env = append(os.Environ(), envInstance+"="+string(js))
	c.cmd.SysProcAttr = childProcAttr()
	c.cmd.Stderr = &c.stderr
	if logw != nil {
		c.cmd.Stderr = io.MultiWriter(&c.stderr, logw)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("scheduler: %s: %w", cfg.Name, err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("scheduler: %s: %w", cfg.Name, err)
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("scheduler: start %s: %w", cfg.Name, err)
	}
	d.children = append(d.children, c)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				d.send(ev)
			}
		}
		c.waitErr = c.cmd.Wait()
		close(c.exited)
		d.send(event{Event: "exited", Instance: c.name})
	}()
	return c, nil
}

// send passes an instance's event to the coordinator, stamped with the time it
// came, unless the coordinator has stopped.
func (d *demo) send(ev event) {
	select {
	case d.events <- timedEvent{time.Now(), ev}:
	case <-d.quit:
	}
}

// is matches the event kind of one instance.
func is(instance, kind string) func(event) bool {
	return func(ev event) bool { return ev.Instance == instance && ev.Event == kind }
}

// await records events in the timeline until one matches, and returns it. It
// fails after within, or if an instance exits or fails first.
func (d *demo) await(what string, within time.Duration, match func(event) bool) (event, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case te := <-d.events:
			d.record(te)
			if match(te.ev) {
				return te.ev, nil
			}
			if te.ev.Event == "exited" || te.ev.Event == "failed" {
				return te.ev, fmt.Errorf("scheduler: %s %s while waiting for %s%s", te.ev.Instance, te.ev.Event, what, d.logOf(te.ev.Instance))
			}
		case <-deadline.C:
			return event{}, fmt.Errorf("scheduler: no sign of %s within %v (late writes by node-1: %d)", what, within, d.res.Late)
		}
	}
}

// awaitExit records events until c has exited, within the bound, and
// returns an error if it failed.
func (d *demo) awaitExit(c *child, within time.Duration) error {
	if _, err := d.await(c.name+" to exit", within, is(c.name, "exited")); err != nil {
		return err
	}
	if c.waitErr != nil {
		return fmt.Errorf("scheduler: %s exited with %v%s", c.name, c.waitErr, d.logOf(c.name))
	}
	return nil
}

// record adds an instance's event to the timeline.
func (d *demo) record(te timedEvent) {
	ev := te.ev
	var what string
	switch ev.Event {
	case "campaigning":
		what = "campaigns"
	case "leading":
		what = fmt.Sprintf("leads, epoch %d", ev.Epoch)
	case "wrote":
		what = fmt.Sprintf("wrote job %d (epoch %d)", ev.Job, ev.Epoch)
		if ev.Instance == "node-1" && ev.Epoch == d.res.First && d.resumed {
			d.res.Late++
			what += ": admitted after its term ended"
		}
	case "holding":
		what = fmt.Sprintf("about to write its next job (epoch %d)", ev.Epoch)
	case "refused":
		what = fmt.Sprintf("write with epoch %d refused: %s", ev.Epoch, ev.Detail)
	case "stopped":
		what = fmt.Sprintf("stopped leading (epoch %d): %s", ev.Epoch, ev.Detail)
	default:
		what = strings.TrimSpace(ev.Event + " " + ev.Detail)
	}
	d.res.Timeline = append(d.res.Timeline, entry{At: te.at.Sub(d.start), Instance: ev.Instance, What: what})
}

// note adds the coordinator's own action to the timeline.
func (d *demo) note(instance, what string) {
	d.res.Timeline = append(d.res.Timeline, entry{At: time.Since(d.start), Instance: instance, What: what})
}

// logOf returns the tail of an exited instance's log, for an error.
func (d *demo) logOf(name string) string {
	for _, c := range d.children {
		if c.name != name {
			continue
		}
		select {
		case <-c.exited:
			s := c.stderr.String()
			if len(s) > 2000 {
				s = s[len(s)-2000:]
			}
			return "; its log:\n" + s
		default:
		}
	}
	return ""
}

// stopAll kills every instance still running (SIGKILL also ends a stopped
// one) and waits for it.
func (d *demo) stopAll() {
	close(d.quit)
	for _, c := range d.children {
		select {
		case <-c.exited:
			continue
		default:
		}
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
		}
	}
}
