//go:build linux && !nonetns

package lab

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/netns"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/topologies"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fakeLab is a Lab without namespaces: commands run on this machine, pings
// succeed unless a link is down, captures write nothing.
type fakeLab struct {
	top  *topologies.Topology
	down map[string]bool // "a b" of links down
}

func newFakeLab(t *testing.T) *fakeLab {
	t.Helper()
	f, err := topologies.Generate(topologies.Params{Generate: "star", Hosts: 3, Rate: units.Gbps})
	if err != nil {
		t.Fatal(err)
	}
	top, err := f.Build("star3")
	if err != nil {
		t.Fatal(err)
	}
	return &fakeLab{top: top, down: map[string]bool{}}
}

func (f *fakeLab) Topology() *topologies.Topology { return f.top }

func (f *fakeLab) PingAll(ctx context.Context, timeout time.Duration) *PingResult {
	hosts := f.top.Hosts()
	res := &PingResult{}
	for i, h := range hosts {
		res.Hosts = append(res.Hosts, h.Name)
		res.OK = append(res.OK, make([]bool, len(hosts)))
		for j, o := range hosts {
			res.OK[i][j] = i != j && !f.down[h.Name+" "+h.Uplink().Node.Name] && !f.down[o.Name+" "+o.Uplink().Node.Name]
		}
	}
	return res
}

func (f *fakeLab) Link(a, b string, up bool) error {
	if f.top.Node(a) == nil || f.top.Node(b) == nil {
		return fmt.Errorf("no node %s or %s", a, b)
	}
	if f.top.Node(a).IsHost() {
		f.down[a+" "+b] = !up
	} else {
		f.down[b+" "+a] = !up
	}
	return nil
}

func (f *fakeLab) Links() ([]LinkStatus, error) {
	var out []LinkStatus
	for _, l := range f.top.Links {
		out = append(out, LinkStatus{A: l.A.String(), B: l.B.String(), Up: !f.down[l.A.Node.Name+" "+l.B.Node.Name]})
	}
	return out, nil
}

func (f *fakeLab) Port(spec string) (string, string, error) {
	if !strings.HasPrefix(spec, "tor:") {
		return "", "", errors.New("no such port")
	}
	return "tor", "eth" + spec[4:], nil
}

func (f *fakeLab) Capture(ctx context.Context, port string, w io.Writer, opts netns.CaptureOptions) (int, error) {
	if _, _, err := f.Port(port); err != nil {
		return 0, err
	}
	if opts.Duration > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(opts.Duration):
		}
	} else {
		<-ctx.Done()
	}
	return 2, nil
}

func (f *fakeLab) Counters(ctx context.Context, sw string) ([]Counter, error) {
	if sw != "tor" {
		return nil, fmt.Errorf("no switch %q", sw)
	}
	return []Counter{{Name: "tracebed.port_rx", Index: 1, Packets: 3, Bytes: 300}, {Name: "tracebed.port_rx", Index: 2}}, nil
}

func (f *fakeLab) Status() []SwitchStatus {
	return []SwitchStatus{{Name: "tor", PID: 42, Alive: true}}
}

func (f *fakeLab) Exec(node string, cmd *exec.Cmd) error {
	if f.top.Node(node) == nil {
		return fmt.Errorf("no node %q", node)
	}
	return cmd.Start()
}

// TestShellTranscripts runs the scripts of testdata/shell/*.txt: lines
// starting with "> " are commands, the lines after them their expected
// output.
func TestShellTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/shell/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			var got bytes.Buffer
			sh := &Shell{Lab: newFakeLab(t), History: &History{}}
			for _, line := range strings.Split(string(data), "\n") {
				cmd, ok := strings.CutPrefix(line, "> ")
				if !ok {
					continue
				}
				fmt.Fprintf(&got, "> %s\n", cmd)
				var out bytes.Buffer
				sh.Out = &out
				cmd = strings.ReplaceAll(cmd, "$TMP", dir)
				if sh.Do(context.Background(), cmd) {
					fmt.Fprintln(&out, "(shell ends)")
				}
				got.WriteString(strings.ReplaceAll(out.String(), dir, "$TMP"))
			}
			sh.stopCaptures()
			if *update {
				if err := os.WriteFile(file, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got.String() != string(data) {
				t.Errorf("transcript differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", got.String(), data)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "history")
	h := LoadHistory(file)
	for _, l := range []string{"pingall ", "pingall", "h1 ping h2", "", "link h1 tor down"} {
		h.Add(l)
	}
	if h.Len() != 3 || h.At(0) != "link h1 tor down" || h.At(2) != "pingall" {
		t.Errorf("history %v", h.Lines())
	}
	h2 := LoadHistory(file)
	if strings.Join(h2.Lines(), "|") != "pingall|h1 ping h2|link h1 tor down" {
		t.Errorf("history read back: %v", h2.Lines())
	}
	h3 := &History{Limit: 2}
	for _, l := range []string{"a", "b", "c"} {
		h3.Add(l)
	}
	if strings.Join(h3.Lines(), "|") != "b|c" {
		t.Errorf("bounded history: %v", h3.Lines())
	}
}

func TestSubstitute(t *testing.T) {
	top := newFakeLab(t).top
	got := strings.Join(substitute(top, []string{"ping", "-c1", "h2", "tor", "h22"}), " ")
	if want := "ping -c1 10.0.0.2 " + top.Node("tor").IP.String() + " h22"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestProcessStart(t *testing.T) {
	start, err := ProcessStart(os.Getpid())
	if err != nil || start == 0 {
		t.Fatalf("ProcessStart(self) = %d, %v", start, err)
	}
	if !Alive(os.Getpid(), start) || Alive(os.Getpid(), start+1) || Alive(0, 0) {
		t.Error("Alive is wrong about this process")
	}
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if Alive(c.Process.Pid, 0) {
		t.Error("a process that exited is alive")
	}
}
