package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
)

func init() {
	addCommand(newAcquireCmd())
	addCommand(newRenewCmd())
	addCommand(newReleaseCmd())
	addCommand(newStatusCmd())
}

func newAcquireCmd() *cobra.Command {
	var ttl, wait time.Duration
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "acquire NAME [--ttl 30s] [--wait DURATION]",
		Short: "Acquire a lock on the server and print the lease (name, token, lease, ttl)",
		Long: `acquire takes the lock NAME on the fence server ($FENCE_SERVER) and prints the lease:
its name, fencing token, lease id and TTL (-o json: {"name","token","lease","ttl_ms"}).
The lease is not renewed: renew it with 'fence renew' before the TTL runs out, and
release it with 'fence release'. To run a command under a lock, use 'fence lock'.

With --wait it waits up to that long for a held lock (a long poll, woken by the
release). Exit status 75 when the lock stayed held.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("lock name", name); err != nil {
				return err
			}
			if err := checkTTL(ttl); err != nil {
				return err
			}
			if wait < 0 {
				return usagef("--wait %v: must not be negative", wait)
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			lease, err := c.Acquire(ctx, name, ttl, fence.WithWait(wait))
			if err != nil {
				return notAcquired(ctx, name, wait, err)
			}
			return printLease(cmd.OutOrStdout(), lease)
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "lease TTL")
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to wait for a held lock (0: try once)")
	return cmd
}

// notAcquired turns an acquire error into the exit status: 130 when a signal ended
// the wait, 75 when the lock stayed held, 1 otherwise.
func notAcquired(ctx context.Context, name string, wait time.Duration, err error) error {
	if ctx.Err() != nil {
		return &exitCodeError{code: exitInterrupted, err: fmt.Errorf("lock %q: interrupted while acquiring", name)}
	}
	if errors.Is(err, fence.ErrNotAcquired) && !errors.Is(err, fence.ErrUnavailable) {
		return &exitCodeError{code: exitNotAcquired, err: fmt.Errorf("lock %q not acquired within %v: %w", name, wait, err)}
	}
	return err
}

// leaseFlag returns --lease, or $FENCE_LEASE (set by `fence lock` for its child).
func leaseFlag(lease string) (string, error) {
	if lease == "" {
		lease = os.Getenv(envLease)
	}
	if lease == "" {
		return "", usagef("--lease is required (or $%s)", envLease)
	}
	if err := fence.ValidateLeaseID(lease); err != nil {
		return "", usagef("--lease: %v", err)
	}
	return lease, nil
}

func newRenewCmd() *cobra.Command {
	var ttl time.Duration
	var lease string
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "renew NAME --lease ID [--ttl 30s]",
		Short: "Extend a lease to --ttl from now",
		Long: `renew extends the lease ID on lock NAME to --ttl from now. It fails (exit 1) if the
lease expired, was released, or is not the current one: the lock is then no longer
yours, and writes under its token may be refused by a guard.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("lock name", name); err != nil {
				return err
			}
			if err := checkTTL(ttl); err != nil {
				return err
			}
			id, err := leaseFlag(lease)
			if err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			if err := c.Renew(ctx, name, id, ttl); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"name": name, "ttl_ms": ttl.Milliseconds()})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "renewed %s for %v\n", name, ttl)
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "new TTL, from now")
	cmd.Flags().StringVar(&lease, "lease", "", "lease id (default $"+envLease+")")
	return cmd
}

func newReleaseCmd() *cobra.Command {
	var lease string
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "release NAME --lease ID",
		Short: "Release a lease and wake the waiters",
		Long: `release ends the lease ID on lock NAME. It fails (exit 1) if that lease is no longer
held; it never releases somebody else's lease, so retrying is safe.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkName("lock name", name); err != nil {
				return err
			}
			id, err := leaseFlag(lease)
			if err != nil {
				return err
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			if err := c.Release(ctx, name, id); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"name": name, "released": true})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "released %s\n", name)
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().StringVar(&lease, "lease", "", "lease id (default $"+envLease+")")
	return cmd
}

// lockInfoOut is a lock's state as `fence status -o json` prints it.
type lockInfoOut struct {
	Name        string      `json:"name"`
	Held        bool        `json:"held"`
	Token       fence.Token `json:"token,omitempty"`
	LastToken   fence.Token `json:"last_token,omitempty"`
	ExpiresInMs int64       `json:"expires_in_ms,omitempty"`
}

func toInfoOut(i fence.LockInfo) lockInfoOut {
	return lockInfoOut{Name: i.Name, Held: i.Held, Token: i.Token, LastToken: i.LastToken, ExpiresInMs: i.ExpiresIn.Milliseconds()}
}

func newStatusCmd() *cobra.Command {
	var prefix string
	var limit int
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "status [NAME | --prefix P]",
		Short: "Show one lock, or list the locks whose names start with --prefix",
		Long: `status shows whether lock NAME is held, its current token, the last token issued
for it and the time left on the lease. Without NAME it lists the locks whose names
start with --prefix (all locks without it), at most --limit of them. Lease ids are
never shown.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && prefix != "" {
				return usagef("give NAME or --prefix, not both")
			}
			if limit < 0 {
				return usagef("--limit %d: must not be negative", limit)
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				if err := checkName("lock name", args[0]); err != nil {
					return err
				}
				info, err := c.Inspect(ctx, args[0])
				if err != nil {
					return err
				}
				if output == "json" {
					return printJSON(out, toInfoOut(info))
				}
				return printInfos(out, []fence.LockInfo{info})
			}
			infos, err := c.List(ctx, prefix, limit)
			if err != nil {
				return err
			}
			if output == "json" {
				list := make([]lockInfoOut, 0, len(infos))
				for _, i := range infos {
					list = append(list, toInfoOut(i))
				}
				return printJSON(out, map[string]any{"locks": list})
			}
			return printInfos(out, infos)
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().StringVar(&prefix, "prefix", "", "list the locks whose names start with this")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many locks (0: the server's default)")
	return cmd
}

func printInfos(w interface{ Write([]byte) (int, error) }, infos []fence.LockInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHELD\tTOKEN\tLAST TOKEN\tEXPIRES IN")
	for _, i := range infos {
		tok, exp := "-", "-"
		if i.Held {
			tok, exp = i.Token.String(), i.ExpiresIn.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%s\n", i.Name, i.Held, tok, i.LastToken, exp)
	}
	return tw.Flush()
}
