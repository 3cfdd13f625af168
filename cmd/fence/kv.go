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
	"github.com/fencelock/fence/driver"
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
      UTF-8). Exit 1 if KEY was never written.

See 'fence kv put --help' and 'fence kv get --help' for the flags.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return argsError(cmd, "missing a subcommand: put or get")
		},
	}
	cmd.AddCommand(newKVPutCmd(), newKVGetCmd())
	return cmd
}

func newKVPutCmd() *cobra.Command {
	var tokenStr, lease, lock string
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "put KEY --lock NAME --token N [--lease ID] (VALUE | -)",
		Short: "Write VALUE (or stdin, with -) under KEY, fenced by a lock's token",
		Long: `put writes VALUE, or standard input when VALUE is -, under KEY, carrying the fence
of --lock (default $FENCE_LOCK), --token (default $FENCE_TOKEN) and --lease
(default $FENCE_LEASE): under 'fence lock' all three come from the environment.

--lock names the lock that issued the token; it is required, because tokens are
comparable only within one lock: the server refuses a token of another lock than
the one that fences KEY. --lease, when given, lets several writes carry the same
token under one lease.

Exit status 0 when stored; 1 when the token is stale (the message gives the highest
token seen) or the server refuses the write; 2 for usage errors.`,
		Args: exactArgs("a KEY", "a VALUE (or - to read standard input)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, valueArg := args[0], args[1]
			if err := invalidUsage("key", driver.ValidateKey(key)); err != nil {
				return err
			}
			if lock == "" {
				lock = os.Getenv(envLock)
			}
			if lock == "" {
				return usagef("kv put: no lock: give --lock NAME or set $%s (the lock whose token fences the write)", envLock)
			}
			if err := checkName("--lock", lock); err != nil {
				return err
			}
			if tokenStr == "" {
				tokenStr = os.Getenv(envToken)
			}
			if tokenStr == "" {
				return usagef("--token is required (or $%s)", envToken)
			}
			tok, err := fence.ParseToken(tokenStr)
			if err != nil {
				return invalidUsage("--token", err)
			}
			if lease == "" {
				lease = os.Getenv(envLease)
			}
			if lease != "" {
				if err := invalidUsage("--lease", driver.ValidateLeaseID(lease)); err != nil {
					return err
				}
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
				return c.Put(ctx, key, value, fence.Fence{Name: lock, Token: tok, LeaseID: lease})
			}); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": key, "token": tok, "lock": lock, "bytes": len(value)})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "stored %s (%s, token %d)\n", key, byteCount(len(value)), tok)
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().StringVar(&lock, "lock", "", "lock that issued the token; required (default $"+envLock+")")
	cmd.Flags().StringVar(&tokenStr, "token", "", "fencing token; required (default $"+envToken+")")
	cmd.Flags().StringVar(&lease, "lease", "", "lease id (default $"+envLease+")")
	return cmd
}

func newKVGetCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Print the value under KEY (-o json: with its lock and token)",
		Long: `get prints the value stored under KEY as it is, without a newline added. With -o json
it prints {"key","lock","token","value"}, or "value_base64" for a value that is not
UTF-8. Exit 1 if KEY was never written.`,
		Args: exactArgs("a KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := invalidUsage("key", driver.ValidateKey(key)); err != nil {
				return err
			}
			var item fence.Item
			if err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) (err error) {
				item, err = c.Get(ctx, key)
				return err
			}); err != nil {
				return err
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
