package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/sim"
)

// simulateFormats are the --format values, each with its writer.
var simulateFormats = []struct {
	name  string
	write func(io.Writer, *sim.Report) error
}{
	{"text", sim.WriteText},
	{"json", sim.WriteJSON},
	{"mermaid", sim.WriteMermaid},
	{"svg", sim.WriteSVG},
}

func newSimulateCmd() *cobra.Command {
	var (
		scenario string
		fencing  string
		format   string
		seed     uint64
		workers  int
	)
	var names []string
	for _, sc := range sim.Scenarios() {
		names = append(names, fmt.Sprintf("  %-17s %s", sc.Name, sc.Summary))
	}
	cmd := &cobra.Command{
		Use:   "simulate [--scenario NAME] [--fencing on|off] [--seed N] [--format text|json|mermaid|svg]",
		Short: "Replay lock races tick for tick on a virtual clock, with and without fencing",
		Long: `simulate replays the races fencing tokens exist for on a deterministic virtual clock,
driving the real in-memory Locker and Guard (package inmem), and prints the timeline.
Without --fencing it runs the scenario twice, fencing off then on. The same flags and
seed always print byte-identical output.

Scenarios:
` + strings.Join(names, "\n") + `

Formats: text (a timeline for the terminal), json (every event, lease and write),
mermaid (a sequence diagram; paste it into a ` + "```mermaid" + ` block), svg (a
self-contained timeline picture: lanes per worker, leases, pauses, accepted and
rejected writes). The global -o json is the same as --format json.

Example: fence simulate --format svg > pause-past-ttl.svg`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			write, err := simulateWriter(format, output, cmd.Flags().Changed("format"))
			if err != nil {
				return err
			}
			opts := sim.Options{Seed: seed, Workers: workers}
			var rep *sim.Report
			switch fencing {
			case "":
				rep, err = sim.SimulateBoth(scenario, opts)
			case "on", "off":
				rep, err = sim.Simulate(scenario, fencing == "on", opts)
			default:
				return usagef("simulate: --fencing must be on or off, got %q", fencing)
			}
			if errors.Is(err, fence.ErrInvalid) && cmd.Flags().Changed("workers") {
				// The one option out of range is the flag's: name it.
				fact := strings.TrimSuffix(strings.TrimPrefix(err.Error(), "sim: "), ": "+fence.ErrInvalid.Error())
				return usagef("simulate: --workers: %s", fact)
			}
			if errors.Is(err, sim.ErrUnknownScenario) || errors.Is(err, fence.ErrInvalid) {
				return usageError{err} // the options came from the flags
			}
			if err != nil {
				return err
			}
			if err := write(cmd.OutOrStdout(), rep); err != nil {
				return fmt.Errorf("simulate: write output: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", "pause-past-ttl", "scenario to run: "+strings.Join(sim.ScenarioNames(), ", "))
	cmd.Flags().StringVar(&fencing, "fencing", "", "on or off; omitted: run both, off then on")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the random source (the random scenario draws pauses and delays from it)")
	cmd.Flags().StringVar(&format, "format", "text", "output format: text, json, mermaid or svg")
	cmd.Flags().IntVar(&workers, "workers", 0, "workers of the random scenario, 1 to 26 (0: 4); permits of semaphore-pause, 2 to 25 (0: 3)")
	return cmd
}

// simulateWriter picks the writer for --format, honouring the global -o json when
// --format was not given. A conflicting pair is a usage error.
func simulateWriter(format, globalOutput string, formatSet bool) (func(io.Writer, *sim.Report) error, error) {
	if globalOutput == "json" {
		if formatSet && format != "json" {
			return nil, usagef("simulate: -o json conflicts with --format %s", format)
		}
		format = "json"
	}
	var known []string
	for _, f := range simulateFormats {
		if f.name == format {
			return f.write, nil
		}
		known = append(known, f.name)
	}
	return nil, usagef("simulate: --format must be one of %s, got %q", strings.Join(known, ", "), format)
}
