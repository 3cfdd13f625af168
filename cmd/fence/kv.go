package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	fencehttp "github.com/fencelock/fence/http"
)

func init() { addCommand(newKVCmd()) }

func newKVCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Read and write the server's fenced key-value store",
		Long: `kv put writes a value that the server stores only if its fencing token is admitted:
greater than every token the key accepted before (or equal, under the same lease).
A stale write is refused with the highest token seen, and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("kv needs a subcommand: put or get")
		},
	}
	cmd.AddCommand(newKVPutCmd(), newKVGetCmd())
	return cmd
}

func newKVPutCmd() *cobra.Command {
	var tokenStr, lease, lock string
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "put KEY --token N [--lease ID] [--lock NAME] (VALUE | -)",
		Short: "Write VALUE (or stdin, with -) under KEY, fenced by a token",
		Long: `put writes VALUE, or standard input when VALUE is -, under KEY, carrying the fence
--token (default $FENCE_TOKEN), --lease (default $FENCE_LEASE) and --lock (default
$FENCE_LOCK): under 'fence lock' all three come from the environment.

--lock names the lock that issued the token. Without it the server checks the token
against the lock that already fences KEY, and refuses a first write to KEY. Give it
when you can: the server then also refuses a token of another lock.

Fails (exit 1) with the highest token seen when the token is stale.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, valueArg := args[0], args[1]
			if err := fence.ValidateKey(key); err != nil {
				return usagef("key: %v", err)
			}
			if tokenStr == "" {
				tokenStr = os.Getenv(envToken)
			}
			if tokenStr == "" {
				return usagef("--token is required (or $%s)", envToken)
			}
			tok, err := fence.ParseToken(tokenStr)
			if err != nil {
				return usagef("--token: %v", err)
			}
			if lease == "" {
				lease = os.Getenv(envLease)
			}
			if lease != "" {
				if err := fence.ValidateLeaseID(lease); err != nil {
					return usagef("--lease: %v", err)
				}
			}
			if lock == "" {
				lock = os.Getenv(envLock)
			}
			if lock != "" {
				if err := checkName("--lock", lock); err != nil {
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
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			if lock != "" {
				err = c.Put(ctx, key, value, fence.Fence{Name: lock, Token: tok, LeaseID: lease})
			} else {
				err = c.PutToken(ctx, key, value, tok, lease)
			}
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": key, "token": tok, "lock": lock, "bytes": len(value)})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "stored %s (%d bytes, token %d)\n", key, len(value), tok)
			return err
		},
	}
	flags = addClientFlags(cmd)
	cmd.Flags().StringVar(&tokenStr, "token", "", "fencing token (default $"+envToken+")")
	cmd.Flags().StringVar(&lease, "lease", "", "lease id (default $"+envLease+")")
	cmd.Flags().StringVar(&lock, "lock", "", "lock that issued the token (default $"+envLock+")")
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
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := fence.ValidateKey(key); err != nil {
				return usagef("key: %v", err)
			}
			c, err := flags.client()
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			item, err := c.Get(ctx, key)
			if err != nil {
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
			_, err = out.Write(item.Value)
			return err
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}
