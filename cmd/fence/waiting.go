package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// stderrIsTerminal reports whether the process's stderr is a terminal: only then
// do `fence lock` and `fence elect` say that they are waiting.
func stderrIsTerminal() bool {
	fd := os.Stderr.Fd()
	return isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd)
}

// noticeDelay is how long a waitNotice holds a line before printing it: the state
// it describes may be the grant that ends the wait (our own lease), which the
// acquire learns about at the same moment, and then stop drops the line.
const noticeDelay = 200 * time.Millisecond

// waitNotice tells a person at a terminal that `fence lock` or `fence elect` is
// waiting for a held lock: "waiting for NAME: held by OWNER, expires in 3s", once
// when the wait starts and again only when another lease holds it.
type waitNotice struct {
	w    io.Writer
	c    *fencehttp.Client
	name string
	self string // our own owner: a state showing it is the grant, not a holder to wait for
}

// newWaitNotice returns the notice of a wait for name, or nil (no notice) when
// quiet or when stderr is not a terminal.
func newWaitNotice(quiet bool, c *fencehttp.Client, name, self string) *waitNotice {
	if quiet || !stderrIsTerminal() {
		return nil
	}
	return &waitNotice{w: os.Stderr, c: c, name: name, self: self}
}

// start follows name's state until ctx ends or the returned stop is called; stop
// returns once nothing more will be printed. The state is read by blocking
// queries, which answer when the lock's index moves: a new grant, so a new holder
// is told when it comes; a holder of a shared lock or semaphore leaving while
// others stay does not move it, and is told only with the next change. A nil
// notice starts nothing.
func (n *waitNotice) start(ctx context.Context) (stop func()) {
	if n == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		told := "" // the holders last told about
		for info, err := range n.c.Watch(ctx, n.name) {
			if err != nil {
				if errors.Is(err, fence.ErrUnavailable) {
					continue // the wait rides out a restart; so does the notice
				}
				return // a notice is a courtesy: the acquire reports real errors
			}
			who := n.holders(info)
			if who == "" || who == told {
				continue
			}
			seen := time.Now()
			t := time.NewTimer(noticeDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			told = who
			fmt.Fprintln(n.w, n.line(info, time.Since(seen)))
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// holders identifies the leases that hold name in info, by their tokens: it
// changes only when another lease holds it. It is "" when nobody holds it, or
// when we do (the grant that ends the wait).
func (n *waitNotice) holders(info fence.LockInfo) string {
	if !info.Held {
		return ""
	}
	if len(info.Holders) == 0 {
		if n.self != "" && info.Owner == n.self {
			return ""
		}
		return info.Token.String()
	}
	toks := make([]string, len(info.Holders))
	for i, h := range info.Holders {
		if n.self != "" && h.Owner == n.self {
			return ""
		}
		toks[i] = h.Token.String()
	}
	return strings.Join(toks, ",")
}

// line is the notice for info, read elapsed ago: the holder that frees a place
// first (its owner and time left).
func (n *waitNotice) line(info fence.LockInfo, elapsed time.Duration) string {
	owner, left, more := info.Owner, info.ExpiresIn, 0
	if len(info.Holders) > 0 {
		first := slices.MinFunc(info.Holders, func(a, b fence.Holder) int { return cmp.Compare(a.ExpiresIn, b.ExpiresIn) })
		owner, left, more = first.Owner, first.ExpiresIn, len(info.Holders)-1
	}
	by := "held by " + owner
	if owner == "" {
		by = "held (no owner given)"
	}
	if more > 0 {
		by += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("waiting for %s: %s, expires in %s", n.name, by, roundLeft(max(left-elapsed, 0)))
}
