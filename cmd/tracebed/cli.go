//go:build linux && !nonetns

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tracebed/tracebed/emulator/netns/lab"
)

// cliPrompt is the prompt of 'topo cli'.
const cliPrompt = "tracebed> "

func (a *app) topoCLICommand() *cobra.Command {
	var run, script string
	cmd := &cobra.Command{
		Use:   "cli",
		Short: "A shell on a running topology, in the spirit of Mininet's CLI (root)",
		Long: `An interactive shell on a topology that is up ('topo up', 'tracebed mininet'):
'h1 ping -c1 h2' runs a command in a node (node names become addresses),
'pingall', 'link s1 h1 down', 'capture tor:1 f.pcapng', 'counters tor' reads
the switch's P4Runtime counters, 'status' shows the switch processes; 'help'
lists everything. Line editing, Tab completion and history (Up/Down; kept
in ~/.tracebed_history) when standard input is a terminal; otherwise the
commands are read from it, one a line, and echoed after the prompt.

Ctrl-C interrupts the command running; Ctrl-D or 'exit' leaves the shell
and the topology stays up.`,
		Example: "  sudo tracebed topo up star --detach && sudo tracebed topo cli\n" +
			"  echo pingall | sudo tracebed topo cli --run ab12",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := attach("topo cli", run)
			if err != nil {
				return err
			}
			a.warnDead(r)
			// SIGTERM ends the shell; Ctrl-C only the command running
			// (main's handler keeps SIGINT from ending the process).
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
			defer stop()
			intr := make(chan os.Signal, 1)
			signal.Notify(intr, os.Interrupt)
			defer signal.Stop(intr)
			cmdCtx := func(parent context.Context) (context.Context, context.CancelFunc) {
				c, cancel := context.WithCancel(parent)
				go func() {
					select {
					case <-intr:
						cancel()
					case <-c.Done():
					}
				}()
				return c, cancel
			}
			sh := &lab.Shell{Lab: r, Out: a.stdout, History: &lab.History{}}
			if script != "" {
				f, err := os.Open(script)
				if err != nil {
					return badInput(err)
				}
				defer f.Close()
				return sh.Run(ctx, echoLines(bufio.NewScanner(f), a.stdout), cmdCtx)
			}
			if !term.IsTerminal(int(os.Stdin.Fd())) {
				return sh.Run(ctx, echoLines(bufio.NewScanner(os.Stdin), a.stdout), cmdCtx)
			}
			sh.Stdin = os.Stdin
			return a.interactive(ctx, sh, r, cmdCtx)
		},
	}
	addRunFlag(cmd, &run)
	cmd.Flags().StringVar(&script, "script", "", "run the commands in this file, then leave")
	return cmd
}

// echoLines reads commands one a line, echoing each after the prompt.
func echoLines(sc *bufio.Scanner, w io.Writer) func() (string, error) {
	return func() (string, error) {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return "", err
			}
			return "", io.EOF
		}
		fmt.Fprintf(w, "%s%s\n", cliPrompt, sc.Text())
		return sc.Text(), nil
	}
}

// interactive runs the shell on the terminal: raw mode with line editing,
// completion and history while a line is read; cooked mode while a command
// runs, so that it has the terminal as usual.
func (a *app) interactive(ctx context.Context, sh *lab.Shell, r *lab.Run, cmdCtx func(context.Context) (context.Context, context.CancelFunc)) error {
	fd := int(os.Stdin.Fd())
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{ctrlCClears{os.Stdin}, os.Stdout}, cliPrompt)
	if home, err := os.UserHomeDir(); err == nil {
		sh.History = lab.LoadHistory(filepath.Join(home, ".tracebed_history"))
		t.History = sh.History
	}
	t.AutoCompleteCallback = completer(r)
	// Output while a line is edited (a background capture reporting)
	// goes through the terminal, which redraws the line.
	var raw atomic.Bool
	sh.Out = writerFunc(func(p []byte) (int, error) {
		if raw.Load() {
			return t.Write(p)
		}
		return a.stdout.Write(p)
	})
	fmt.Fprintf(a.stdout, "run %s: %s. 'help' lists the commands; Ctrl-D leaves (the topology stays up).\n", r.State.RunID, r.Net.Topology.Summary())
	next := func() (string, error) {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return "", err
		}
		raw.Store(true)
		line, err := t.ReadLine()
		raw.Store(false)
		term.Restore(fd, old)
		if err == io.EOF {
			fmt.Fprintln(a.stdout)
		}
		return line, err
	}
	return sh.Run(ctx, next, cmdCtx)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// ctrlCClears turns Ctrl-C at the prompt into "clear the line, Enter" (an
// empty command): golang.org/x/term would end the input on it.
type ctrlCClears struct{ r io.Reader }

func (c ctrlCClears) Read(p []byte) (int, error) {
	buf := make([]byte, max(len(p)/2, 1))
	k, err := c.r.Read(buf)
	out := p[:0]
	for _, b := range buf[:k] {
		if b == 3 {
			out = append(out, 0x15, '\r') // Ctrl-U, Enter
		} else {
			out = append(out, b)
		}
	}
	return len(out), err
}

// completer completes the word under the cursor on Tab with a command or
// node name.
func completer(r *lab.Run) func(line string, pos int, key rune) (string, int, bool) {
	words := []string{"nodes", "net", "dump", "links", "pingall", "link", "capture", "counters", "status", "source", "history", "help", "exit", "quit", "up", "down", "stop", "all"}
	for _, n := range r.Net.Topology.Nodes {
		words = append(words, n.Name)
	}
	slices.Sort(words)
	return func(line string, pos int, key rune) (string, int, bool) {
		if key != '\t' {
			return "", 0, false
		}
		start := strings.LastIndexByte(line[:pos], ' ') + 1
		prefix := line[start:pos]
		var match []string
		for _, w := range words {
			if strings.HasPrefix(w, prefix) {
				match = append(match, w)
			}
		}
		if len(match) == 0 {
			return "", 0, false
		}
		common := match[0]
		for _, m := range match[1:] {
			for !strings.HasPrefix(m, common) {
				common = common[:len(common)-1]
			}
		}
		if len(match) == 1 {
			common += " "
		}
		return line[:start] + common + line[pos:], start + len(common), true
	}
}
