package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence/internal/cluster"
)

// clusterRestoreCommands returns `restore` and `migrate`, the subcommands of
// `fence cluster` that work on data directories and files on this machine, with
// no server running.
func clusterRestoreCommands() []*cobra.Command {
	return []*cobra.Command{newClusterRestoreCmd(), newClusterMigrateCmd()}
}

func newClusterRestoreCmd() *cobra.Command {
	var (
		node, peers, data string
		bump, above       uint64
		peerTLS           bool
	)
	cmd := &cobra.Command{
		Use:   "restore SNAPSHOT --node NAME --peers a=HOST:PORT,... [--data ./fence-data] [--bump N] [--above TOKEN]",
		Short: "Write a node's cluster data from a backup or migration snapshot, tokens bumped",
		Long: `restore writes DATA/cluster, the cluster data of node --node, from SNAPSHOT (written by
'fence cluster backup' or 'fence cluster migrate'). Run it on every node, with the same
SNAPSHOT and the same --peers the nodes are started with, then start each node with
'fence serve --node NAME --peers ... --data DATA'.

A restore takes the cluster back to the snapshot, so its revision, of which tokens
are made, would go back too and tokens issued after the backup would be issued again.
restore raises the revision by --bump (default 1000000000) and marks every older revision
compacted: the tokens of the restored cluster start above the snapshot's revision
plus --bump. The bump must exceed every revision (grant, renewal, release, KV write)
the lost cluster wrote after the backup: the default covers a day of 10,000 writes a second;
raise it for an older backup or a busier cluster.

A snapshot knows nothing of what happened after it, earlier restores included:
restoring a backup taken before another restore would raise the revision only
by --bump above that backup's, below the tokens the later cluster issued.
--above TOKEN gives the floor: the highest token the cluster reached, counting
earlier bumps (the "tokens_above" of the last restore plus the writes since, or
the highest token a guard has seen). The bump is then counted from the larger of
the snapshot's revision and TOKEN.

restore refuses a DATA/cluster that holds anything: stop the node and move its old
data away first. With -o json it prints {"node","dir","snapshot","revision","bump",
"above","tokens_above"}.`,
		Args: exactArgs("a SNAPSHOT file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if peers == "" {
				return usagef("restore: --peers is required: every node as NAME=HOST:PORT, comma-separated")
			}
			peerMap, err := parsePeers(peers)
			if err != nil {
				return err
			}
			if node == "" {
				return usagef("restore: --node is required: the name of this node in --peers")
			}
			if _, ok := peerMap[node]; !ok {
				return usagef("restore: --node %q is not in --peers (%s)", node, strings.Join(sortedNames(peerMap), ", "))
			}
			if data == "" {
				return usagef("restore: --data is empty: want the node's data directory")
			}
			if bump == 0 {
				return usagef("restore: --bump 0 would hand out again the tokens issued after the backup; leave it out for the default %d", uint64(cluster.DefaultRevisionBump))
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			cfg := cluster.RestoreConfig{
				Snapshot: args[0], Name: node, Peers: peerMap, Dir: filepath.Join(data, "cluster"),
				PeerTLS: peerTLS, Bump: bump, Above: above,
			}
			if err := cluster.Restore(ctx, cfg); err != nil {
				return err
			}
			rev, err := cluster.SnapshotRevision(cfg.Snapshot)
			if err != nil {
				return err
			}
			tokensAbove := cfg.TokensAbove(rev)
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{
					"node": node, "dir": cfg.Dir, "snapshot": cfg.Snapshot,
					"revision": rev, "bump": bump, "above": above, "tokens_above": tokensAbove,
				})
			}
			from := fmt.Sprintf("revision %d", rev)
			if above > uint64(rev) {
				from = fmt.Sprintf("revision %d, floor %d (--above),", rev, above)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "restored node %s into %s from %s: %s raised by %d, tokens start above %d\nstart it with: fence serve --node %s --peers %s --data %s%s\n",
				node, cfg.Dir, cfg.Snapshot, from, bump, tokensAbove, node, peers, data, serveFlagsForPeers(peerMap, peerTLS))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&node, "node", "", "this node's name in --peers; required")
	f.StringVar(&peers, "peers", "", "every node as NAME=HOST:PORT (peer address), comma-separated, as the nodes are started with; required")
	f.StringVar(&data, "data", "./fence-data", "the node's data directory; restore writes DATA/cluster")
	f.Uint64Var(&bump, "bump", cluster.DefaultRevisionBump, "how far to raise the revision (and so the tokens) above the snapshot's: more than the writes made after the backup")
	f.Uint64Var(&above, "above", 0, "the highest token the cluster reached, counting earlier bumps: the bump is counted from it when it is above the snapshot's revision (restoring a backup taken before another restore)")
	f.BoolVar(&peerTLS, "peer-tls", false, "the nodes run with --peer-cert, --peer-key and --peer-ca (https peer URLs)")
	return cmd
}

// serveFlagsForPeers returns the flags that the serve line a restore prints
// needs for its peers: the certificate flags with peer TLS, --allow-plain-peers
// for plain peers off loopback (the node refuses to start otherwise), else
// nothing.
func serveFlagsForPeers(peers map[string]string, peerTLS bool) string {
	if peerTLS {
		return " --peer-cert CERT --peer-key KEY --peer-ca CA"
	}
	if _, _, open := plainPeerOffLoopback(peers); open {
		return " --allow-plain-peers"
	}
	return ""
}

func newClusterMigrateCmd() *cobra.Command {
	var from, out string
	cmd := &cobra.Command{
		Use:   "migrate --from OLD_DATA_DIR --out SNAPSHOT",
		Short: "Write a cluster snapshot from a single node's embedded store, tokens kept rising",
		Long: `migrate reads the embedded store of a single node (OLD_DATA_DIR/fence.db, the --data
of its 'fence serve', which must be stopped) and writes SNAPSHOT, from which
'fence cluster restore' makes every node of a new cluster. The cluster keeps every
fenced KV key with its value and fence, and every lock name's next token is above
every token the single node issued (heal floors included): the snapshot's revision
is already past them. Leases are not carried over; the single node's holders are
fenced off by the first writes of the cluster's.

It writes nothing to OLD_DATA_DIR and refuses an existing SNAPSHOT. With -o json it
prints {"from","snapshot","names","items","max_token","revision"}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || out == "" {
				return usagef("migrate: --from and --out are required: migrate --from OLD_DATA_DIR --out SNAPSHOT")
			}
			ctx, stop := signalContext(cmd)
			defer stop()
			rep, err := cluster.Migrate(ctx, cluster.MigrateConfig{From: from, Out: out})
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "migrated %d lock names and %d keys from %s into %s: highest token %d, snapshot revision %d\nnext, on every node: fence cluster restore %s --node NAME --peers a=HOST:PORT,... --data DIR\n",
				rep.Names, rep.Items, rep.From, rep.Snapshot, rep.MaxToken, rep.Revision, rep.Snapshot)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the single node's data directory (its --data), or its store file; required")
	f.StringVar(&out, "out", "", "snapshot file to write (must not exist); required")
	return cmd
}
