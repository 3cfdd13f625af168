package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// benchMoved is the answer of `fence bench`: the side-by-side benchmark links other
// lock libraries and its own load machinery, so it is a command of its own
// (cmd/fence-bench) and the product binary links neither.
var benchMoved = errors.New("bench is not part of the fence binary: run go run ./cmd/fence-bench [flags] from the fence source tree (same flags, same table)")

// newBenchCmd is the contract's `fence bench`: a usage error (exit 2) that says
// where the benchmark went, whatever the arguments.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "bench",
		Short:              "Moved: the side-by-side benchmark is go run ./cmd/fence-bench",
		Long:               "The side-by-side benchmark of fence and its peers is its own command, so that the\nfence binary links no other lock library:\n\n  go run ./cmd/fence-bench [-o json] [--clients 16] [--duration 1s] [--rounds 5] [--rows ...]",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a == "-h" || a == "--help" {
					return cmd.Help()
				}
			}
			return usageError{benchMoved}
		},
	}
}
