package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence/fencehttp"
	"github.com/fencelock/fence/internal/cluster"
)

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Operate a cluster of fence servers (fence serve --node): status, add, remove, backup",
		Long: `cluster operates a cluster of 'fence serve --node NAME --peers ...' nodes through
any one of them ($FENCE_SERVER or --server): no etcd tool and no etcd port.

  fence cluster status [-o json]
      every member: name, peer URL, API URL, leader, healthy (as the node asked
      sees them; a node cut off from the majority sees none healthy).
  fence cluster add NAME=HOST:PORT
      adds a member, then prints the 'fence serve ... --join' command line that
      starts its node (admin).
  fence cluster remove NAME
      removes a member; its node stops (admin).
  fence cluster backup FILE
      writes a snapshot of the cluster's store to FILE, mode 0600 (admin).

See docs/cluster.md.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return argsError(cmd, "missing a subcommand: status, add, remove, backup, restore or migrate")
		},
	}
	cmd.AddCommand(newClusterStatusCmd(), newClusterAddCmd(), newClusterRemoveCmd(), newClusterBackupCmd())
	cmd.AddCommand(clusterRestoreCommands()...) // restore and migrate: local operations on data directories
	return cmd
}

func newClusterStatusCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every member of the cluster: name, peer, API URL, leader, health",
		Long: `status shows every member of the cluster the server is a node of. With -o json:
{"members":[{"name","peer","leader","healthy","api"}, ...]}.

A member is healthy when its node runs and reaches the majority: its registration,
renewed through the leader every second on a 2 s lease, is live. Exit status: 0
when answered (whatever the health), 1 for errors (a server not in cluster mode,
an unreachable server), 2 for usage errors.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ms []fencehttp.ClusterMember
			err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				var err error
				ms, err = c.ClusterStatus(ctx)
				return err
			})
			if err != nil {
				return err
			}
			return printMembers(cmd.OutOrStdout(), ms)
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}

// printMembers prints the members as JSON (-o json) or a table.
func printMembers(w io.Writer, ms []fencehttp.ClusterMember) error {
	if ms == nil {
		ms = []fencehttp.ClusterMember{}
	}
	if output == "json" {
		return printJSON(w, fencehttp.ClusterStatus{Members: ms})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPEER\tAPI\tLEADER\tHEALTHY")
	for _, m := range ms {
		name, api, leader, healthy := m.Name, m.API, "", "no"
		if name == "" {
			name = "(not started)"
		}
		if api == "" {
			api = "-"
		}
		if m.Leader {
			leader = "leader"
		}
		if m.Healthy {
			healthy = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, m.Peer, api, leader, healthy)
	}
	return tw.Flush()
}

func newClusterAddCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "add NAME=HOST:PORT",
		Short: "Add a member to the running cluster and print the command that starts its node",
		Long: `add adds a member named NAME whose peer address is HOST:PORT to the running
cluster, then prints the command line that starts its node: 'fence serve --node
NAME --peers <every member>,NAME=HOST:PORT --join', to which you add the --listen,
--data, auth and TLS flags the other nodes use. Until that node starts, the cluster
counts a member that does not answer: start it soon, or remove it. A node whose
peers speak plain HTTP refuses a member off loopback unless it runs with
--allow-plain-peers, and the line then carries that flag too.

etcd refuses the change (exit 1, "unavailable") when it would leave fewer started
members than a quorum, and within a few seconds of a member's start: try again.
Needs an admin token. With -o json: {"name","peer","command","members"}.`,
		Args: exactArgs("NAME=HOST:PORT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, peer, ok := strings.Cut(args[0], "=")
			if !ok || name == "" || peer == "" {
				return usagef("%q: want NAME=HOST:PORT, the new node's name and peer address", args[0])
			}
			if _, err := parsePeers(args[0]); err != nil {
				return err
			}
			var ms []fencehttp.ClusterMember
			err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				var err error
				ms, err = c.AddMember(ctx, name, peer)
				return err
			})
			if err != nil {
				return err
			}
			line, tls := joinCommand(name, ms)
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), struct {
					Name    string                    `json:"name"`
					Peer    string                    `json:"peer"`
					Command string                    `json:"command"`
					Members []fencehttp.ClusterMember `json:"members"`
				}{name, peer, line, ms})
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "added %s (peer %s). Start its node with:\n\n  %s\n\n", name, peer, line)
			fmt.Fprintln(out, "adding the --listen, --data and auth flags the other nodes use.")
			switch {
			case tls:
				fmt.Fprintln(out, "The cluster uses peer TLS: give the node a certificate for its address, its key, and the cluster's CA.")
			case strings.Contains(line, "--allow-plain-peers"):
				fmt.Fprintln(out, "The cluster's peers speak plain HTTP beyond loopback, as its nodes allow with --allow-plain-peers: keep that network private, or move the cluster to peer TLS.")
			}
			return nil
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}

// joinCommand returns the `fence serve` command line that starts the node of
// the member named name, just added: every member's peer address in --peers,
// and --join; and whether the peers speak TLS (the line then names the
// certificate flags with placeholders). Plain peers off loopback get
// --allow-plain-peers on the line, as the running nodes must have it: the node
// would refuse to start without it.
func joinCommand(name string, ms []fencehttp.ClusterMember) (string, bool) {
	var peers []string
	tls, offLoopback := false, false
	for _, m := range ms {
		u, err := url.Parse(m.Peer)
		if err != nil || m.Name == "" {
			continue // a member added and never started, under no name the cluster knows
		}
		tls = tls || u.Scheme == "https"
		offLoopback = offLoopback || cluster.PeerOffLoopback(u.Host)
		peers = append(peers, m.Name+"="+u.Host)
	}
	line := fmt.Sprintf("fence serve --node %s --peers %s --join", name, strings.Join(peers, ","))
	switch {
	case tls:
		line += " --peer-cert CERT --peer-key KEY --peer-ca CA"
	case offLoopback:
		line += " --allow-plain-peers"
	}
	return line, tls
}

func newClusterRemoveCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member from the cluster (its node stops)",
		Long: `remove removes the member NAME from the cluster. Its node's member stops and its
fence serve exits; its data directory is then of no further use (start a node
again with 'fence cluster add'). Removing a member that does not answer is how a
dead machine leaves the cluster. Needs an admin token. Exit status: 1 for an
unknown member or when the cluster cannot take the change.`,
		Args: exactArgs("a member NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			var ms []fencehttp.ClusterMember
			err := flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				var err error
				ms, err = c.RemoveMember(ctx, name)
				return err
			})
			if err != nil {
				return err
			}
			if output == "json" {
				return printMembers(cmd.OutOrStdout(), ms)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", name)
			return err
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}

func newClusterBackupCmd() *cobra.Command {
	var flags *clientFlags
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a snapshot of the cluster's store to FILE",
		Long: `backup writes a snapshot of the cluster's store (etcd's snapshot format, ending in
its checksum) to FILE, with mode 0600: it holds every lock, lease id and value.
It writes FILE.tmp beside it and renames it once the whole snapshot is on disk, so
FILE is never a partial snapshot; an existing FILE is refused. Needs an admin
token. With -o json: {"file","bytes"}.`,
		Args: exactArgs("a FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if _, err := os.Lstat(file); err == nil {
				return fmt.Errorf("backup: %s exists: remove it or choose another file", file)
			}
			tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".tmp")
			f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			var n int64
			err = flags.call(cmd, func(ctx context.Context, c *fencehttp.Client) error {
				var err error
				n, err = c.Snapshot(ctx, f)
				return err
			})
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp, file)
			}
			if err != nil {
				os.Remove(tmp)
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), struct {
					File  string `json:"file"`
					Bytes int64  `json:"bytes"`
				}{file, n})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes)\n", file, n)
			return err
		},
	}
	flags = addClientFlags(cmd)
	return cmd
}
