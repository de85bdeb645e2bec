// Command tracebed runs trace-driven experiments on switch resources shared
// by many tenants: multi-tenant in-network aggregation (DynaINA and its
// baselines), in-network aggregation over RDMA reliable connections
// (FreeINA against ATP, on tracebed's own RoCEv2 transport) and far-memory
// eviction (Glitter and Fastswap), on a deterministic simulation or on real
// network namespaces.
//
// Exit codes: 0 success; 1 failure: a run failed or was interrupted
// (SIGINT, SIGTERM), compare found a regression, or tracebed has a bug (an
// internal error); 2 bad input (a file, a flag).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/dataplane"
	"github.com/tracebed/tracebed/experiments"
	"github.com/tracebed/tracebed/internal/yamlx"
	"github.com/tracebed/tracebed/p4/programs"
	jobtrace "github.com/tracebed/tracebed/traces/jobs"
	memtrace "github.com/tracebed/tracebed/traces/mem"
	"github.com/tracebed/tracebed/workloads/farmem"
	"github.com/tracebed/tracebed/workloads/incast"
	"github.com/tracebed/tracebed/workloads/rdma"
	"github.com/tracebed/tracebed/workloads/training"
)

// version is tracebed's release; commit is set at build time by the Makefile
// (-ldflags "-X main.commit=…") or read from the Go build information.
var (
	version = "0.1.0-dev"
	commit  = ""
)

// Exit codes.
const (
	exitOK       = 0
	exitRunError = 1
	exitBadInput = 2
)

// exitCode is an error that sets the process's exit code without a message
// (the exit status of a command run by 'topo exec').
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func (e exitCode) ExitCode() int { return int(e) }

// inputError marks errors caused by the user's input (exit code 2).
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

func badInput(err error) error { return inputError{err} }

// app holds what the commands share; main builds one, tests build their own.
type app struct {
	stdout, stderr io.Writer
	registry       *experiments.Registry
	embedded       []embeddedFS
	args           []string // the command line without the program name, for provenance.json
	// netnsRunPrefix starts the run ids of the netns testbeds of 'run'
	// (tests set it to find their own runs); empty means random ids.
	netnsRunPrefix string

	// programs returns the data planes the switches of this binary run
	// (the engine is handed them: it knows none).
	programs func() (*dataplane.Registry, error)
}

// embeddedFS is a directory of files built into the binary, reachable by
// paths that start with prefix (e.g. "traces/").
type embeddedFS struct {
	prefix string
	fsys   fs.FS
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{
		stdout: stdout, stderr: stderr,
		embedded: []embeddedFS{{prefix: "traces/jobs/", fsys: jobtrace.Samples}, {prefix: "traces/mem/", fsys: memtrace.Files}},
		programs: programs.Registry,
		registry: experiments.NewRegistry(kinds()...),
	}
}

// kinds are the kinds of experiment tracebed runs.
func kinds() []experiments.Kind {
	return []experiments.Kind{
		incast.Kind{},
		training.Kind{},
		farmem.Kind{},
		rdma.Kind{},
	}
}

// readEmbedded serves a file built into the binary by its repository path.
func (a *app) readEmbedded(path string) ([]byte, error) {
	for _, e := range a.embedded {
		if rest, ok := strings.CutPrefix(path, e.prefix); ok {
			return fs.ReadFile(e.fsys, rest)
		}
	}
	return nil, fs.ErrNotExist
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tracebed",
		Short: "A trace-driven testbed for switch resources shared by many tenants",
		Long: `tracebed reproduces multi-tenant in-network aggregation (DynaINA against
SwitchML, ATP and no INA), in-network aggregation that keeps RDMA reliable
connections working (FreeINA against ATP, on tracebed's own RoCEv2
transport) and far-memory eviction (Glitter against Fastswap) on a
deterministic simulation (sim, the default) or on real network namespaces
(netns), and prints comparison tables.

Run the default suite with 'tracebed run'; see 'tracebed run --help'.

Exit codes, for every command: 0 success; 1 failure (a run failed or was
interrupted, compare found a regression, or an internal error: a bug in
tracebed, which says so); 2 bad input (a file, a flag).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return badInput(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	root.AddCommand(a.runCommand(), a.validateCommand(), a.versionCommand(), a.topoCommand())
	root.AddCommand(a.switchCommand(), a.cleanupCommand(), a.mininetCommand())
	root.AddCommand(a.reportCommand(), a.compareCommand(), a.benchCommand())
	root.AddCommand(a.mergeCommand(), a.exportCommand(), a.imageCommand()) // sweeps beyond one machine: shard.go, export.go, image.go
	root.AddCommand(a.traceCommand())
	return root
}

// execute runs the command line and returns the exit code: 0, 1 when a
// run failed, was interrupted or tracebed has a bug (a panic: "internal
// error", with a hint to report it), 2 for bad input.
func (a *app) execute(ctx context.Context, args []string) (exit int) {
	a.args = args
	defer func() {
		if p := recover(); p != nil {
			internalError(a.stderr, p, debug.Stack())
			exit = exitRunError
		}
	}()
	root := a.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code) // a command run by 'topo exec' failed; it said why
	}
	if a.panicked(err) {
		return exitRunError
	}
	fmt.Fprintln(a.stderr, "tracebed:", err)
	var ie inputError
	if errors.As(err, &ie) || yamlx.IsInputError(err) || strings.HasPrefix(err.Error(), "unknown command") ||
		strings.Contains(err.Error(), "accepts ") || strings.Contains(err.Error(), "requires at least") {
		return exitBadInput
	}
	return exitRunError
}

func buildCommit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return ""
}

func main() { os.Exit(mainWith(newApp)) }

// mainWith runs the command line of this process with the app newApp
// builds (tests add kinds), under the crash monitor where there is one,
// and returns the exit code.
func mainWith(newApp func(stdout, stderr io.Writer) *app) int {
	if code, ok := superviseCrashes(os.Args[1:]); ok {
		return code
	}
	crashOutput()
	ctx, stop := signalContext(os.Stderr)
	defer stop()
	return newApp(os.Stdout, os.Stderr).execute(ctx, os.Args[1:])
}
