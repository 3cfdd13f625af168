package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

func newKVCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Read and write the server's fenced key-value store",
		Long: `kv reads and writes the fenced key-value store of the fence server ($FENCE_SERVER).

  fence kv put KEY --lock NAME --token N [--lease ID] (VALUE | -)
      writes VALUE, or standard input when VALUE is -, under KEY. The server stores
      it only if the fencing token N of lock NAME is admitted: greater than every
      token KEY accepted before (or equal, under the same --lease). A stale write
      is refused (exit 1) with the highest token seen, and changes nothing.
      --lock, --token and --lease default to $FENCE_LOCK, $FENCE_TOKEN and
      $FENCE_LEASE, which 'fence lock' sets for its command: under it,
      'fence kv put KEY VALUE' needs no flags. --lock is required: the server
      compares only tokens of the same lock.

  fence kv get KEY
      prints the value under KEY as it is (no newline added); with -o json
      {"key","lock","token","value"} ("value_base64" for a value that is not
      UTF-8). Exit 1 if KEY holds no value (never written, or deleted: the
      message then names the key's fence).

  fence kv delete KEY --lock NAME --token N [--lease ID]
      removes the value under KEY, fenced as put is; the key's fence stays, so a
      stale writer is still refused. Exit 1 if KEY holds no value.

  fence kv purge KEY
      removes KEY's value and its fence (needs an admin token): the one way a
      key's fence goes back, for a key fenced by the wrong lock.

The server refuses a token it never issued for --lock (above the lock's last
token, or a lock never granted) and a --lease that is not the lease it issued
the token to (exit 1, "never issued" / "issued to another lease"), and writes
nothing. It also refuses the token of a live lease without --lease (exit 1,
"belongs to a live lease"): the token is public, and a write with it alone
would fence the holder out. Once the lease has ended, the token alone is
admitted as any token is.

See 'fence kv COMMAND --help' for the flags.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return argsError(cmd, "missing a subcommand: put, get, delete or purge")
		},
	}
	cmd.AddCommand(newKVPutCmd(), newKVGetCmd(), newKVDeleteCmd(), newKVPurgeCmd())
	return cmd
}

// fenceFlags are the --lock, --token and --lease of a fenced write.
type fenceFlags struct{ lock, token, lease string }

func addFenceFlags(cmd *cobra.Command) *fenceFlags {
	f := &fenceFlags{}
	cmd.Flags().StringVar(&f.lock, "lock", "", "lock that issued the token; required (default $"+envLock+")")
	cmd.Flags().StringVar(&f.token, "token", "", "fencing token; required (default $"+envToken+")")
	cmd.Flags().StringVar(&f.lease, "lease", "", "lease id, sent as Fence-Lease (default $"+envLease+")")
	return f
}

// fence returns the fence the flags give, each defaulting to its environment
// variable, or a usage error naming what is missing or malformed; op names the
// command in the message.
func (f *fenceFlags) fence(op string) (fence.Fence, error) {
	lock, tokenStr, lease := f.lock, f.token, f.lease
	if lock == "" {
		lock = os.Getenv(envLock)
	}
	if lock == "" {
		return fence.Fence{}, usagef("%s: no lock: give --lock NAME or set $%s (the lock whose token fences the write)", op, envLock)
	}
	if err := checkName("--lock", lock); err != nil {
		return fence.Fence{}, err
	}
	if tokenStr == "" {
		tokenStr = os.Getenv(envToken)
	}
	if tokenStr == "" {
		return fence.Fence{}, usagef("--token is required (or $%s)", envToken)
	}
	tok, err := fence.ParseToken(tokenStr)
	if err != nil {
		return fence.Fence{}, invalidUsage("--token", err)
	}
	if lease == "" {
		lease = os.Getenv(envLease)
	}
	if lease != "" {
		if err := invalidUsage("--lease", fence.ValidateLeaseID(lease)); err != nil {
			return fence.Fence{}, err
		}
	}
	return fence.Fence{Name: lock, Token: tok, LeaseID: lease}, nil
}

func newKVPutCmd() *cobra.Command {
	var ff *fenceFlags
	var flags *clientFlags
	var attempt *attemptFlag
	cmd := &cobra.Command{
		Use:   "put KEY --lock NAME --token N [--lease ID] (VALUE | -)",
		Short: "Write VALUE (or stdin, with -) under KEY, fenced by a lock's token",
		Long: `put writes VALUE, or standard input when VALUE is -, under KEY, carrying the fence
of --lock (default $FENCE_LOCK), --token (default $FENCE_TOKEN) and --lease
(default $FENCE_LEASE): under 'fence lock' all three come from the environment.

--lock names the lock that issued the token; it is required, because tokens are
comparable only within one lock: the server refuses a token of another lock than
the one that fences KEY. --lease lets several writes carry the same token under
one lease, and lets the server check that the token was issued to that lease;
while the token's lease is live, the server requires it.

Every attempt of the write, on each server it is retried on, carries one attempt
id (Fence-Attempt), which the server's store claims: an attempt that lands late
(a paused server) writes nothing over a later write. --attempt ID gives the id,
so that running the command again for the same write (after "cannot reach")
names it too; without it each run makes its own. Never give one ID to two
writes: a second write of the same value would exit 0 and write nothing.

Exit status 0 when stored; 1 when the token is stale (the message gives the highest
token seen), was never issued for the lock, or the server refuses the write; 2 for
usage errors.`,
		Args: exactArgs("a KEY", "a VALUE (or - to read standard input)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, valueArg := args[0], args[1]
			if err := invalidUsage("key", fence.ValidateKey(key)); err != nil {
				return err
			}
			f, err := ff.fence("kv put")
			if err != nil {
				return err
			}
			if err := attempt.check(); err != nil {
				return err
			}
			var value []byte
			if valueArg == "-" {
				if value, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), fencehttp.DefaultMaxValueBytes*64)); err != nil {
					return fmt.Errorf("kv put %q: reading stdin: %w", key, err)
				}
			} else {
				value = []byte(valueArg)
			}
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				return c.Put(attempt.context(ctx), key, value, f)
			}); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": key, "token": f.Token, "lock": f.Name, "bytes": len(value)})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "stored %s (%s, token %d)\n", key, byteCount(len(value)), f.Token)
			return err
		},
	}
	flags = addClientFlags(cmd)
	ff = addFenceFlags(cmd)
	attempt = addAttemptFlag(cmd)
	return cmd
}

func newKVDeleteCmd() *cobra.Command {
	var ff *fenceFlags
	var flags *clientFlags
	var attempt *attemptFlag
	cmd := &cobra.Command{
		Use:   "delete KEY --lock NAME --token N [--lease ID]",
		Short: "Remove the value under KEY, fenced by a lock's token; the key's fence stays",
		Long: `delete removes the value stored under KEY, carrying the fence of --lock (default
$FENCE_LOCK), --token (default $FENCE_TOKEN) and --lease (default $FENCE_LEASE),
which the server admits as it admits a put. The key keeps the delete's fence, so a
stale writer is still refused after the value is gone; 'fence kv get KEY' then
fails, naming that fence.

Its attempts carry one attempt id, as put's do (--attempt ID gives it); a retry
of a delete that was applied exits 0.

Exit status 0 when deleted; 1 when KEY holds no value (never written, or already
deleted), when the token is stale or was never issued for the lock, or the server
refuses the delete; 2 for usage errors.`,
		Args: exactArgs("a KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := invalidUsage("key", fence.ValidateKey(key)); err != nil {
				return err
			}
			f, err := ff.fence("kv delete")
			if err != nil {
				return err
			}
			if err := attempt.check(); err != nil {
				return err
			}
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				return c.Delete(attempt.context(ctx), key, f)
			}); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": key, "token": f.Token, "lock": f.Name, "deleted": true})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted %s (token %d)\n", key, f.Token)
			return err
		},
	}
	flags = addClientFlags(cmd)
	ff = addFenceFlags(cmd)
	attempt = addAttemptFlag(cmd)
	return cmd
}

func newKVPurgeCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "purge KEY",
		Short: "Remove KEY's value and its fence (admin)",
		Long: `purge removes the value stored under KEY and the key's fence, so that the next write
under any lock is admitted: the one way a key's fence goes back, meant for a key
fenced by the wrong lock (a typo in --lock). Until the next write fences KEY
again, a stale writer is not refused for it. It needs an admin token
($FENCE_AUTH_TOKEN) on a server with auth tokens.

Exit status 0 when purged; 1 when KEY has neither value nor fence, or the server
refuses; 2 for usage errors.`,
		Args: exactArgs("a KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := invalidUsage("key", fence.ValidateKey(key)); err != nil {
				return err
			}
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				return c.Purge(ctx, key)
			}); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": key, "purged": true})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "purged %s\n", key)
			return err
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}

func newKVGetCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value under KEY (-o json: with its lock and token)",
		Long: `get prints the value stored under KEY as it is, without a newline added. With -o json
it prints {"key","lock","token","value"}, or "value_base64" for a value that is not
UTF-8. Exit 1 if KEY holds no value: never written, or deleted (the message then
names the fence the key keeps).`,
		Args: exactArgs("a KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := invalidUsage("key", fence.ValidateKey(key)); err != nil {
				return err
			}
			var item fence.Item
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) (err error) {
				item, err = c.Get(ctx, key)
				return err
			}); err != nil {
				return err
			}
			if item.Value == nil {
				return fmt.Errorf("get %q: no value (the key is fenced by lock %q at token %d)", key, item.Fence.Name, item.Fence.Token)
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				v := map[string]any{"key": key, "lock": item.Fence.Name, "token": item.Fence.Token}
				if utf8.Valid(item.Value) {
					v["value"] = string(item.Value)
				} else {
					v["value_base64"] = base64.StdEncoding.EncodeToString(item.Value)
				}
				return printJSON(out, v)
			}
			_, err := out.Write(item.Value)
			return err
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}
