package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
)

// attemptFlag is the --attempt of a fenced write (kv put, kv delete): the write's
// attempt id, sent as Fence-Attempt. Without it the client makes one per
// command, the same on each retry within it; with it a script that runs the
// command again after a failure (exit 1, "cannot reach") names the same write,
// so an earlier attempt that lands late writes nothing.
type attemptFlag struct{ id string }

func addAttemptFlag(cmd *cobra.Command) *attemptFlag {
	a := &attemptFlag{}
	cmd.Flags().StringVar(&a.id, "attempt", "", "attempt id of this write, the same when the command is run again for it (default: a new random one)")
	return a
}

// check returns a usage error for a malformed --attempt.
func (a *attemptFlag) check() error {
	if a.id == "" {
		return nil
	}
	return invalidUsage("--attempt", fence.ValidateAttemptID(a.id))
}

// context returns ctx naming its write by --attempt, or ctx as it is without it.
func (a *attemptFlag) context(ctx context.Context) context.Context {
	if a.id == "" {
		return ctx
	}
	return fence.WithWriteAttempt(ctx, a.id)
}
