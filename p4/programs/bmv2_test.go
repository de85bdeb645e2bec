package programs_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tracebed/tracebed/emulator/bmv2"
	"github.com/tracebed/tracebed/emulator/p4rt"
	"github.com/tracebed/tracebed/p4/programs"
	"github.com/tracebed/tracebed/topologies"
)

// recorder is a P4Runtime client whose P4Info gives every object of info
// another id (as p4c's ids differ from the Go twins'), recording writes.
type recorder struct {
	info   *p4configv1.P4Info
	writes []*p4v1.Update
}

func (r *recorder) P4Info() *p4configv1.P4Info { return r.info }
func (r *recorder) Write(_ context.Context, u ...*p4v1.Update) error {
	r.writes = append(r.writes, u...)
	return nil
}
func (r *recorder) Read(context.Context, ...*p4v1.Entity) ([]*p4v1.Entity, error) { return nil, nil }

const shift = 0x100

func renumbered(info *p4configv1.P4Info) *p4configv1.P4Info {
	info = proto.Clone(info).(*p4configv1.P4Info)
	for _, t := range info.GetTables() {
		t.Preamble.Id += shift
		for _, f := range t.GetMatchFields() {
			f.Id += shift
		}
		for _, r := range t.GetActionRefs() {
			r.Id += shift
		}
		if t.ImplementationId != 0 {
			t.ImplementationId += shift
		}
	}
	for _, a := range info.GetActions() {
		a.Preamble.Id += shift
		for _, p := range a.GetParams() {
			p.Id += shift
		}
	}
	for _, p := range info.GetActionProfiles() {
		p.Preamble.Id += shift
		for i := range p.TableIds {
			p.TableIds[i] += shift
		}
	}
	return info
}

// TestConfigure: bmv2.Configure writes the entries each program's Go twin starts with (the
// topology's routes) are written to the switch with every id renamed to
// the switch's P4Info.
func TestConfigure(t *testing.T) {
	top, err := topologies.Open("leafspine")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			prog := reg.Lookup(name)
			sw := top.Node("leaf2")
			r := &recorder{info: renumbered(prog.P4Info)}
			if err := bmv2.Configure(context.Background(), r, top, sw, prog); err != nil {
				t.Fatal(err)
			}
			var tables int
			for _, u := range r.writes {
				if u.GetType() != p4v1.Update_INSERT {
					t.Errorf("update type %v", u.GetType())
				}
				te := u.GetEntity().GetTableEntry()
				if te == nil {
					continue
				}
				tables++
				if te.GetTableId() < shift {
					t.Errorf("table id %#x not renamed", te.GetTableId())
				}
				for _, f := range te.GetMatch() {
					if f.GetFieldId() < shift {
						t.Errorf("field id %d not renamed", f.GetFieldId())
					}
				}
				check := func(a *p4v1.Action) {
					if a.GetActionId() < shift {
						t.Errorf("action id %#x not renamed", a.GetActionId())
					}
					for _, p := range a.GetParams() {
						if p.GetParamId() < shift {
							t.Errorf("param id %d not renamed", p.GetParamId())
						}
					}
				}
				if a := te.GetAction().GetAction(); a != nil {
					check(a)
				}
				for _, pa := range te.GetAction().GetActionProfileActionSet().GetActionProfileActions() {
					check(pa.GetAction())
				}
			}
			// At least a route to every other node.
			if want := len(top.Routes()[sw.Name]); tables < want {
				t.Errorf("%d table entries written, want at least the %d routes", tables, want)
			}
		})
	}
	// A switch program that lacks a table the Go twin fills is an error
	// that names it.
	prog := reg.Lookup("fwd")
	info := renumbered(prog.P4Info)
	info.Tables = nil
	err = bmv2.Configure(context.Background(), &recorder{info: info}, top, top.Node("leaf1"), prog)
	if err == nil || !strings.Contains(err.Error(), "ingress.ipv4_route") {
		t.Errorf("missing table: %v", err)
	}
}

var update = flag.Bool("update", false, "with p4c-bm2-ss installed: rewrite the committed P4Info files with p4c's output")

// committedP4Info is where each program's P4Info, as p4c-bm2-ss writes it,
// is kept.
var committedP4Info = map[string]string{
	"fwd":     "../fwd/fwd.p4info.txtpb",
	"farmem":  "../farmem/farmem.p4info.txtpb",
	"ina":     "../ina/ina.p4info.txtpb",
	"freeina": "../freeina/freeina.p4info.txtpb",
}

// TestCompile compiles every program with p4c-bm2-ss (where installed):
// the compilation is clean (no warning), the committed P4Info files are
// p4c's output (-update rewrites them), the registry's P4Info — the Go
// twin's — has p4c's ids, and a second compilation comes from the cache.
func TestCompile(t *testing.T) {
	if _, err := exec.LookPath(bmv2.CompilerTool); err != nil {
		t.Skipf("skipping: %s is not on PATH (p4lang/p4c; see docs/bmv2.md)", bmv2.CompilerTool)
	}
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	// The user's cache (by hash of source and compiler version), shared
	// with the conformance test and the netns testbed: each program is
	// compiled once per change, and what the cache holds is p4c's output
	// with its warnings (p4c.log).
	opts := bmv2.Options{Compiler: bmv2.CompilerTool, Switch: bmv2.CompilerTool}
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			prog := reg.Lookup(name)
			p, err := bmv2.Compile(ctx, prog, opts)
			if err != nil {
				t.Fatal(err)
			}
			if w := unexpectedWarnings(p.Warnings); w != "" {
				t.Errorf("p4c-bm2-ss %s.p4 is not clean:\n%s", name, w)
			}
			path := committedP4Info[name]
			if path == "" {
				t.Fatalf("program %s has no committed P4Info (committedP4Info)", name)
			}
			out, err := os.ReadFile(filepath.Join(p.Dir, name+".p4info.txtpb"))
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			committed := &p4configv1.P4Info{}
			if err := prototext.Unmarshal(b, committed); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if !proto.Equal(committed, p.P4Info) {
				t.Errorf("%s is not p4c's P4Info for %s.p4: run go test ./p4/programs -run Compile -update and review the diff", path, name)
			}
			// Ids: the Go switch accepts p4c's P4Info, bmv2 the Go
			// twin's (sizes may differ: ina's registers follow the
			// topology's aggregators; the packages' own tests compare
			// shapes for the source's configuration).
			if err := p4rt.SameIDs(prog.P4Info, p.P4Info); err != nil {
				t.Errorf("the Go twin's P4Info and p4c's ids differ:\n%v", err)
			}
			if got := p.P4Info.GetPkgInfo().GetName(); got != name {
				t.Errorf("p4c names the program %q (@pkginfo), the registry %q", got, name)
			}
			again, err := bmv2.Compile(ctx, prog, opts)
			if err != nil || again.Dir != p.Dir || len(p.JSON) == 0 {
				t.Errorf("recompiled to %s (was %s): %v", again.Dir, p.Dir, err)
			}
		})
	}
}

// harmlessWarning is the one warning p4c-bm2-ss may print for tracebed's
// programs. p4c's front end gives every table without a default action
// the default NoAction, and the bmv2 back end then says it cannot run a
// default on a table whose actions come from an action profile: it leaves
// it out, and a miss runs no action — what NoAction would have done.
// ingress.ipv4_route (fwd.p4's, which farmem.p4 and freeina.p4 carry)
// declares no default; its miss falls through to route_miss, on bmv2 as
// on the Go twin (the vectors' no_route cases; docs/bmv2.md).
const harmlessWarning = "Target does not support default_action for ingress.ipv4_route (due to action profiles)"

// unexpectedWarnings returns the compiler's output less harmlessWarning
// and the two lines of source it quotes.
func unexpectedWarnings(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rest []string
	for i := 0; i < len(lines); i++ {
		if strings.Contains(lines[i], harmlessWarning) {
			i += 2 // the source line and the caret line under it
			continue
		}
		if strings.TrimSpace(lines[i]) != "" {
			rest = append(rest, lines[i])
		}
	}
	return strings.Join(rest, "\n")
}
