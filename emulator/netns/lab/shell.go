//go:build linux && !nonetns

package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/topologies"
)

// Lab is what a Shell drives: a Run (or, in tests, a stand-in).
type Lab interface {
	Topology() *topologies.Topology
	PingAll(ctx context.Context, timeout time.Duration) *PingResult
	Link(a, b string, up bool) error
	Links() ([]LinkStatus, error)
	Port(spec string) (node, iface string, err error)
	Capture(ctx context.Context, port string, w io.Writer, opts netns.CaptureOptions) (int, error)
	Counters(ctx context.Context, sw string) ([]Counter, error)
	Status() []SwitchStatus
	Exec(node string, cmd *exec.Cmd) error
}

var _ Lab = (*Run)(nil)

// LinkStatus is one link of a run and whether both its ends are up.
type LinkStatus struct {
	A, B string // NODE:IFACE
	Up   bool
}

// Links returns every link of the run with its state.
func (r *Run) Links() ([]LinkStatus, error) {
	var out []LinkStatus
	for _, l := range r.Net.Topology.Links {
		up, err := r.Net.LinkUp(l.A)
		if err != nil {
			return nil, err
		}
		out = append(out, LinkStatus{A: l.A.String(), B: l.B.String(), Up: up})
	}
	return out, nil
}

// ShellHelp lists the commands of the shell.
const ShellHelp = `Commands (as in Mininet's CLI):
  nodes                          list the nodes
  net                            list each node's links
  dump                           nodes with address, MAC and namespace
  links                          each link and whether it is up
  pingall                        ping every host from every other host
  link A B up|down               bring the links between nodes A and B up or down
  NODE COMMAND...                run COMMAND in NODE's namespace; node names become
                                 their addresses (h1 ping -c1 h2)
  capture NODE:PORT FILE [DUR]   capture a port (both directions, pcapng) in the
                                 background, for DUR (e.g. 10s) or until 'capture stop'
  capture stop                   stop the captures and report their frames
  counters SWITCH [all]          the switch's P4Runtime counters (cells that are not
                                 zero; all: every cell)
  status                         the switch processes: running or dead
  source FILE                    run the commands in FILE
  history                        the commands entered so far
  help                           this list
  exit, quit, Ctrl-D             leave the shell (the topology stays up)
`

// Shell is the interpreter of 'tracebed topo cli': one command a line, in
// the spirit of Mininet's CLI. Its methods are called from one goroutine;
// background captures report on Out from their own.
type Shell struct {
	Lab Lab
	// Out receives every command's output.
	Out io.Writer
	// Stdin is the standard input of commands run in nodes (nil: none).
	Stdin io.Reader
	// History records the lines entered (nil: none kept).
	History *History

	mu       sync.Mutex // guards Out for background captures
	captures []*capture
}

type capture struct {
	port, file string
	cancel     context.CancelFunc
	done       chan struct{}
	frames     int
	err        error
}

// Run reads commands from next until it returns io.EOF or a command ends
// the shell, and executes each with a context from ctx (a command ends
// when its context does, so a caller may cancel one command on Ctrl-C
// with cmdCtx). It stops the captures still running before it returns.
func (s *Shell) Run(ctx context.Context, next func() (string, error), cmdCtx func(context.Context) (context.Context, context.CancelFunc)) error {
	defer s.stopCaptures()
	if cmdCtx == nil {
		cmdCtx = context.WithCancel
	}
	for ctx.Err() == nil {
		line, err := next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		c, cancel := cmdCtx(ctx)
		quit := s.Do(c, line)
		cancel()
		if quit {
			return nil
		}
	}
	return ctx.Err()
}

// Do executes one command line and reports whether it ends the shell.
func (s *Shell) Do(ctx context.Context, line string) (quit bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return false
	}
	if s.History != nil {
		s.History.Add(line)
	}
	args := strings.Fields(line)
	top := s.Lab.Topology()
	switch cmd := args[0]; cmd {
	case "exit", "quit", "EOF":
		return true
	case "help", "?":
		s.print(ShellHelp)
	case "nodes":
		var names []string
		for _, n := range top.Nodes {
			names = append(names, n.Name)
		}
		s.printf("available nodes are: \n%s\n", strings.Join(names, " "))
	case "net":
		for _, n := range top.Nodes {
			var ps []string
			for _, p := range n.Ports {
				ps = append(ps, fmt.Sprintf("%s:%s", p.Iface, p.Peer))
			}
			s.printf("%s %s\n", n.Name, strings.Join(ps, " "))
		}
	case "dump":
		for _, n := range top.Nodes {
			s.printf("<%s %s: %s %s>\n", kindName(n), n.Name, n.IP, n.MAC)
		}
	case "links":
		ls, err := s.Lab.Links()
		if err != nil {
			s.errorf("%v", err)
			break
		}
		for _, l := range ls {
			st := "OK OK"
			if !l.Up {
				st = "DOWN"
			}
			s.printf("%s<->%s (%s)\n", l.A, l.B, st)
		}
	case "pingall":
		s.Lab.PingAll(ctx, time.Second).Write(s.out())
	case "link":
		if len(args) != 4 || (args[3] != "up" && args[3] != "down") {
			s.errorf("usage: link A B up|down")
			break
		}
		if err := s.Lab.Link(args[1], args[2], args[3] == "up"); err != nil {
			s.errorf("%v", err)
		}
	case "capture":
		s.capture(args[1:])
	case "counters":
		if len(args) < 2 || len(args) > 3 || (len(args) == 3 && args[2] != "all") {
			s.errorf("usage: counters SWITCH [all]")
			break
		}
		cs, err := s.Lab.Counters(ctx, args[1])
		if err != nil {
			s.errorf("%v", err)
			break
		}
		WriteCounters(s.out(), cs, len(args) == 3)
	case "status":
		st := s.Lab.Status()
		if len(st) == 0 {
			s.print("no switch processes (Linux bridges)\n")
		}
		for _, sw := range st {
			s.printf("%s\n", sw)
		}
	case "source":
		if len(args) != 2 {
			s.errorf("usage: source FILE")
			break
		}
		return s.source(ctx, args[1])
	case "history":
		if s.History != nil {
			for i, l := range s.History.Lines() {
				s.printf("%5d  %s\n", i+1, l)
			}
		}
	default:
		if top.Node(cmd) == nil {
			s.errorf("unknown command or node %q (help lists the commands)", cmd)
			break
		}
		if len(args) == 1 {
			s.errorf("usage: %s COMMAND... (e.g. %s ip addr)", cmd, cmd)
			break
		}
		s.exec(ctx, cmd, substitute(top, args[1:]))
	}
	return false
}

func kindName(n *topologies.Node) string {
	if n.IsHost() {
		return "Host"
	}
	return "Switch"
}

// substitute replaces every argument that names a node by its address, as
// Mininet's CLI does.
func substitute(top *topologies.Topology, args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if n := top.Node(a); n != nil {
			out[i] = n.IP.String()
		}
	}
	return out
}

// exec runs a command line in node's namespace through sh -c, with its
// output on Out, until it exits or ctx ends.
func (s *Shell) exec(ctx context.Context, node string, args []string) {
	c := exec.CommandContext(ctx, "sh", "-c", strings.Join(args, " "))
	c.Stdout, c.Stderr = s.out(), s.out()
	c.Stdin = s.Stdin
	c.WaitDelay = time.Second
	if err := s.Lab.Exec(node, c); err != nil {
		s.errorf("%v", err)
		return
	}
	if err := c.Wait(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ctx.Err() != nil {
			s.errorf("%s: %v", node, err)
		}
	}
}

func (s *Shell) source(ctx context.Context, file string) bool {
	f, err := os.Open(file)
	if err != nil {
		s.errorf("%v", err)
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() && ctx.Err() == nil {
		if s.Do(ctx, sc.Text()) {
			return true
		}
	}
	if err := sc.Err(); err != nil {
		s.errorf("%s: %v", file, err)
	}
	return false
}

func (s *Shell) capture(args []string) {
	if len(args) == 1 && args[0] == "stop" {
		s.stopCaptures()
		return
	}
	if len(args) < 2 || len(args) > 3 {
		s.errorf("usage: capture NODE:PORT FILE [DURATION] | capture stop")
		return
	}
	if _, _, err := s.Lab.Port(args[0]); err != nil {
		s.errorf("capture: %v", err)
		return
	}
	var opts netns.CaptureOptions
	if len(args) == 3 {
		d, err := time.ParseDuration(args[2])
		if err != nil || d <= 0 {
			s.errorf("capture: duration %q: want e.g. 10s", args[2])
			return
		}
		opts.Duration = d
	}
	f, err := os.Create(args[1])
	if err != nil {
		s.errorf("capture: %v", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &capture{port: args[0], file: args[1], cancel: cancel, done: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		defer close(c.done)
		defer f.Close()
		close(started)
		c.frames, c.err = s.Lab.Capture(ctx, c.port, f, opts)
		if ctx.Err() == nil { // it ended on its own (duration, error)
			s.report(c)
		}
	}()
	<-started
	s.captures = append(s.captures, c)
	s.printf("capturing %s to %s in the background ('capture stop' ends it)\n", c.port, c.file)
}

func (s *Shell) report(c *capture) {
	if c.err != nil {
		s.errorf("capture %s: %v", c.port, c.err)
		return
	}
	s.printf("capture %s: %d frames in %s\n", c.port, c.frames, c.file)
}

// stopCaptures ends every capture still running and reports it.
func (s *Shell) stopCaptures() {
	for _, c := range s.captures {
		select {
		case <-c.done:
			continue // it ended on its own and said so
		default:
		}
		c.cancel()
		<-c.done
		s.report(c)
	}
	s.captures = nil
}

// out is Out, safe to share with background captures.
func (s *Shell) out() io.Writer { return lockedWriter{s} }

type lockedWriter struct{ s *Shell }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.Out.Write(p)
}

func (s *Shell) print(text string) { io.WriteString(s.out(), text) }

func (s *Shell) printf(format string, args ...any) { fmt.Fprintf(s.out(), format, args...) }

func (s *Shell) errorf(format string, args ...any) {
	s.printf("*** "+format+"\n", args...)
}

// History is the shell's command history: the lines entered, oldest
// first, kept in a file across sessions when File is set (as Mininet keeps
// ~/.mininet_history). It implements golang.org/x/term's History.
type History struct {
	File  string
	Limit int // lines kept; 0 means 1000
	lines []string
}

// LoadHistory reads the history kept in file (none if it does not exist).
func LoadHistory(file string) *History {
	h := &History{File: file}
	if data, err := os.ReadFile(file); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" {
				h.lines = append(h.lines, l)
			}
		}
		h.trim()
	}
	return h
}

func (h *History) limit() int {
	if h.Limit > 0 {
		return h.Limit
	}
	return 1000
}

func (h *History) trim() {
	if over := len(h.lines) - h.limit(); over > 0 {
		h.lines = h.lines[over:]
	}
}

// Add records a line (not a repeat of the last one) and appends it to File.
func (h *History) Add(line string) {
	line = strings.TrimSpace(line)
	if line == "" || len(h.lines) > 0 && h.lines[len(h.lines)-1] == line {
		return
	}
	h.lines = append(h.lines, line)
	h.trim()
	if h.File != "" {
		if f, err := os.OpenFile(h.File, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

// Len returns the number of lines.
func (h *History) Len() int { return len(h.lines) }

// At returns a line, 0 being the most recent.
func (h *History) At(i int) string { return h.lines[len(h.lines)-1-i] }

// Lines returns the lines, oldest first.
func (h *History) Lines() []string { return slices.Clone(h.lines) }
