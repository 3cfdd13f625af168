package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/internal/chaos"
)

// matrixFlags are the flags of fence chaos --matrix.
type matrixFlags struct {
	on      bool          // --matrix
	stores  string        // --stores, comma-separated
	control time.Duration // --control-duration
}

// runMatrix runs fence chaos --matrix: cfg is every cell's configuration from the
// flags, nemeses the value of --nemesis (a selection only if given).
func runMatrix(cmd *cobra.Command, cfg chaos.Config, mx matrixFlags, nemeses string) error {
	for _, name := range []string{"store", "fencing"} {
		if cmd.Flags().Changed(name) {
			return usagef("--%s does not go with --matrix, which runs every store (pick them with --stores) fenced, and a control per store", name)
		}
	}
	mc := chaos.MatrixConfig{Stores: splitList(mx.stores), ControlDuration: mx.control}
	if cmd.Flags().Changed("nemesis") {
		if mc.Nemeses = splitList(nemeses); len(mc.Nemeses) == 0 {
			return usagef("--nemesis: want at least one of %s with --matrix", strings.Join(chaos.Nemeses, ","))
		}
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("chaos: find own binary: %w", err)
	}
	cfg.Binary = bin
	out := cmd.OutOrStdout()
	if output == "text" {
		// As for one run; the lines of each cell's start and end stay.
		cfg.Progress = out
		cfg.ProgressInPlace = isTerminal(out)
	}
	mc.Cell = cfg // Results "": chaos.Matrix makes a temporary directory
	w := watchSignals(cmd.Context())
	defer w.stop()
	res, err := chaos.Matrix(w.ctx, mc)
	if sig := w.end(); sig != 0 {
		doing := "running"
		if res != nil {
			doing += "; results in " + res.Dir
		}
		return interrupted("chaos matrix", doing, sig)
	}
	if errors.Is(err, fence.ErrInvalid) && res == nil {
		return usageError{err} // the config came from the flags
	}
	if res == nil {
		return err
	}
	if output == "json" {
		if jerr := printJSON(out, matrixJSON(res)); jerr != nil {
			return jerr
		}
	} else {
		chaos.FormatMatrix(out, res)
		fmt.Fprintf(out, "run folders: %s\n", res.Dir)
	}
	if err != nil {
		return &exitCodeError{exitError, err}
	}
	if failed := res.Failed(); len(failed) > 0 {
		names := make([]string, len(failed))
		for i, c := range failed {
			names[i] = c.Store + " " + c.Nemesis
			if c.Control {
				names[i] = c.Store + " control"
			}
		}
		return &exitCodeError{exitError, fmt.Errorf("chaos matrix: %d of %d cells failed: %s", len(failed), len(res.Cells), strings.Join(names, ", "))}
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks and "none".
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" && s != "none" {
			out = append(out, s)
		}
	}
	return out
}

// matrixJSON is the JSON object of a matrix: its verdict and a summary per cell.
func matrixJSON(m *chaos.MatrixResult) map[string]any {
	cells := make([]map[string]any, len(m.Cells))
	for i, c := range m.Cells {
		j := map[string]any{}
		if c.Summary != nil {
			j = summaryJSON(c.Summary)
		}
		j["store"], j["nemesis"], j["control"], j["seed"] = c.Store, c.Nemesis, c.Control, c.Seed
		j["fencing"], j["injected_nemesis"], j["verdict"] = !c.Control, c.Faults(), c.Verdict()
		j["passed"], j["elapsed_ms"] = c.Passed(), c.Elapsed.Milliseconds()
		if c.Err != nil {
			j["error"] = c.Err.Error()
		}
		cells[i] = j
	}
	return map[string]any{"passed": m.Passed(), "cells": cells, "dir": m.Dir, "elapsed_ms": m.Elapsed.Milliseconds()}
}
