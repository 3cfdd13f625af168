// Command fence is the fence binary: a lock server, a CLI for it, and the demo,
// simulator, chaos and benchmark tools. It holds wiring only; the logic lives in the
// packages it imports.
//
// Each subcommand registers itself from its own file with addCommand, so commands
// can be added without touching this file.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses shared by all commands.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// exitError carries a specific exit status out of a command's RunE.
type exitCodeError struct {
	code int
	err  error // may be nil: exit silently with code
}

func (e *exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCodeError) Unwrap() error { return e.err }

// usageError marks an error in the command line itself (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

var commands []*cobra.Command

// addCommand registers a subcommand; call it from an init function.
func addCommand(c *cobra.Command) { commands = append(commands, c) }

// output is the value of the global -o flag: "text" or "json".
var output string

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "fence",
		Short:         "Distributed locks with fencing tokens, and the tools to prove them",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usagef("-o must be text or json, got %q", output)
			}
			return nil
		},
	}
	root.PersistentFlags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	for _, c := range commands {
		root.AddCommand(c)
	}
	return root
}

func main() { os.Exit(run(os.Args[1:])) }

// run executes the command line and returns the exit status. Errors are printed as
// one line on stderr.
func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		if ec.err != nil {
			fmt.Fprintln(os.Stderr, "fence:", oneLine(ec.err))
		}
		return ec.code
	}
	fmt.Fprintln(os.Stderr, "fence:", oneLine(err))
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return exitUsage
	}
	return exitError
}

// oneLine returns err's message on one line: drivers (pgx, etcd) put newlines and
// tabs in theirs, and the CLI contract is one line per error.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// isCobraUsage recognises cobra's own argument errors (unknown command, wrong
// number of args), which it returns as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most",
		"unknown flag", "unknown shorthand", "invalid argument", "flag needs an argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
