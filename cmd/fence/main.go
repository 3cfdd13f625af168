// Command fence is the fence binary: a lock server, a CLI for it, and the demo,
// simulator and chaos tools. It holds wiring only; the logic lives in the packages it
// imports. The side-by-side benchmark, which links other lock libraries, is a command
// of its own (cmd/fence-bench): this binary links none of them.
//
// Each subcommand is built by a constructor in its own file; newRootCmd calls them
// all (subcommands), so that every run of the command line starts from fresh flag
// values.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fencelock/fence"
	"github.com/fencelock/fence/fencehttp"
)

// Exit statuses shared by all commands.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// exitCodeError carries a specific exit status out of a command's RunE.
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

// subcommands are the constructors of fence's commands; help lists the commands
// by name, whatever the order here.
var subcommands = []func() *cobra.Command{
	newAcquireCmd, newRenewCmd, newReleaseCmd, newRevokeCmd, newStatusCmd,
	newBenchCmd, newChaosCmd, newClusterCmd, newDemoCmd, newElectCmd, newKVCmd, newLeaderCmd, newLockCmd, newServeCmd, newSimulateCmd,
}

// output is the value of the global -o flag: "text" or "json".
var output string

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "fence",
		Short:         "Distributed locks with fencing tokens, and the tools to prove them",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usagef("-o must be text or json, got %q", output)
			}
			return nil
		},
		// Without a command the usage goes to stderr and the exit status is 2, as for
		// any other incomplete command line.
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return &exitCodeError{code: exitUsage}
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	root.SetFlagErrorFunc(flagError)
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd())
	}
	return root
}

func main() { os.Exit(run(os.Args[1:])) }

// run executes the command line and returns the exit status. Errors are printed as
// one line on stderr: "fence: MESSAGE", or with -o json {"error","code"}.
func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	code := exitError
	var ec *exitCodeError
	var ue usageError
	switch {
	case errors.As(err, &ec):
		code = ec.code
		if ec.err == nil {
			return code // the command said what there was to say
		}
	case errors.As(err, &ue) || isCobraUsage(err):
		code = exitUsage
	}
	printError(os.Stderr, err, code, output == "json" || jsonAsked(args))
	return code
}

// printError prints err, which ends the command with exit status code, as one
// line on w: "fence: MESSAGE", or as JSON {"error":"MESSAGE","code":"CODE"} (see
// errorCode). A refused auth token, and a live lease's token sent without its
// lease, say what to do about it.
func printError(w io.Writer, err error, code int, asJSON bool) {
	msg := oneLine(err)
	if errors.Is(err, fencehttp.ErrUnauthorized) {
		msg += "; set " + envAuthToken + " to a token the server accepts"
	}
	if errors.Is(err, fence.ErrLeaseRequired) {
		msg += "; give --lease or set " + envLease
	}
	if !asJSON {
		fmt.Fprintln(w, "fence:", msg)
		return
	}
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, errorCode(err, code)})
	fmt.Fprintf(w, "%s\n", b)
}

// errorCodes are the codes of -o json errors for the root package's sentinels and
// the client's, as the server names them in its answers.
var errorCodes = []struct {
	err  error
	code string
}{
	{fence.ErrUnavailable, "unavailable"},
	{fencehttp.ErrUnauthorized, "unauthorized"},
	{fencehttp.ErrForbidden, "forbidden"},
	{fence.ErrInvalid, "invalid"},
	{fence.ErrNotFound, "not_found"},
	{fence.ErrNotAcquired, "held"},
	{fence.ErrUnissuedToken, "unissued_token"},
	{fence.ErrLeaseRequired, "lease_required"},
	{fence.ErrStaleToken, "stale_token"},
	{fence.ErrNamespace, "wrong_lock"},
	{fence.ErrTokenExhausted, "token_exhausted"},
	{fence.ErrNotHeld, "not_held"},
	{fence.ErrNotImplemented, "not_implemented"},
}

// errorCode is the "code" of a -o json error: "usage" for a command line that is
// wrong (exit 2), the server's own code for its answers ("stale_token", ...),
// "held" when the lock stayed held (75), "lease_lost" (76), "interrupted" for a
// signal that ended a wait (128+N), "cannot_start" for a CMD that could not be
// started (127), the code of the error's sentinel, else "error".
func errorCode(err error, exit int) string {
	var se *fencehttp.ServerError
	switch {
	case exit == exitUsage:
		return "usage"
	case errors.As(err, &se) && se.Code != "":
		return se.Code
	case exit == exitNotAcquired:
		return "held"
	case exit == exitLeaseLost:
		return "lease_lost"
	case exit == 127:
		return "cannot_start"
	case exit > 128:
		return "interrupted"
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "error"
}

// jsonAsked reports whether the command line asks for -o json before any "--",
// for an error met before the flags were parsed (an unknown flag).
func jsonAsked(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-ojson" || a == "-o=json" || a == "--output=json":
			return true
		case (a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] == "json":
			return true
		}
	}
	return false
}

// oneLine returns err's message on one line: drivers (pgx, etcd) put newlines and
// tabs in theirs, and the CLI contract is one line per error. The caller prints
// "fence: " before it, so the root package's own prefix, which its sentinels and
// typed errors carry ("chaos: fence: invalid argument: ..."), is dropped rather
// than said again.
func oneLine(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	for strings.HasPrefix(msg, "fence: ") {
		msg = strings.TrimPrefix(msg, "fence: ")
	}
	return strings.ReplaceAll(msg, ": fence: ", ": ")
}

// byteCount is n bytes as a message says it: "1 byte", "0 bytes", "12 bytes".
func byteCount(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}

// isCobraUsage recognises cobra's own argument errors that no hook of ours turns
// into a usageError (cobra's help and completion commands return plain errors).
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "accepts ", "requires at least", "requires at most",
		"unknown flag", "unknown shorthand", "flag needs an argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// cmdName is the command's path without the binary's name: "kv put".
func cmdName(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Name()
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// usageLine is the command's synopsis as its help shows it: "fence lock NAME ...".
func usageLine(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Use
	}
	return cmd.Parent().CommandPath() + " " + cmd.Use
}

// argsError is a usage error about the positional arguments, ending with the
// command's usage line so the one line says what to type instead.
func argsError(cmd *cobra.Command, format string, a ...any) error {
	return usageError{fmt.Errorf("%s: %s; usage: %s", cmdName(cmd), fmt.Sprintf(format, a...), usageLine(cmd))}
}

// exactArgs wants exactly len(what) positional arguments; what names them for the
// message ("a lock NAME").
func exactArgs(what ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(what) {
			return argsError(cmd, "missing %s", strings.Join(what[len(args):], " and "))
		}
		if len(args) > len(what) {
			return argsError(cmd, "unexpected argument %q", args[len(what)])
		}
		return nil
	}
}

// maxArgs allows at most n positional arguments.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return argsError(cmd, "unexpected argument %q", args[n])
		}
		return nil
	}
}

// noArgs refuses positional arguments: on a command with subcommands the first one
// is a mistyped subcommand, with cobra's suggestions when it has any.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasAvailableSubCommands() {
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's default, set lazily by cobra itself
		}
		hint := ""
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return usageError{fmt.Errorf("unknown command %q for %q%s; run '%s --help' for the commands", args[0], cmd.CommandPath(), hint, cmd.CommandPath())}
	}
	return argsError(cmd, "unexpected argument %q (it takes no arguments)", args[0])
}

// flagError turns pflag's parse errors into one actionable line naming the command.
func flagError(cmd *cobra.Command, err error) error {
	help := fmt.Sprintf("run '%s --help' for its flags", cmd.CommandPath())
	var (
		notExist *pflag.NotExistError
		needsVal *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
		syntax   *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &notExist):
		flag := "--" + notExist.GetSpecifiedName()
		if s := notExist.GetSpecifiedShortnames(); s != "" {
			flag = "-" + notExist.GetSpecifiedName()[:1]
		}
		return usagef("%s: unknown flag %s; %s", cmdName(cmd), flag, help)
	case errors.As(err, &needsVal):
		return usagef("%s: --%s needs a value; %s", cmdName(cmd), needsVal.GetFlag().Name, help)
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		want := fmt.Sprint(invalid.Unwrap())
		switch f.Value.Type() {
		case "duration":
			want = "want a duration such as 500ms, 30s or 5m"
		case "int", "int64", "uint", "uint64":
			want = "want a whole number"
		}
		return usagef("%s: --%s %q: %s", cmdName(cmd), f.Name, invalid.GetValue(), want)
	case errors.As(err, &syntax):
		return usagef("%s: bad flag syntax %q; %s", cmdName(cmd), syntax.GetSpecifiedFlag(), help)
	}
	return usagef("%s: %v; %s", cmdName(cmd), err, help)
}
