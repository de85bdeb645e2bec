package programs_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
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

// TestCompile: bmv2.Compile compiles every program with p4c-bm2-ss (where installed):
// the P4Info has the Go twin's name, tables and actions, and a second
// compilation comes from the cache.
func TestCompile(t *testing.T) {
	if _, err := exec.LookPath(bmv2.CompilerTool); err != nil {
		t.Skipf("skipping: %s is not on PATH (p4lang/p4c; see docs/bmv2.md)", bmv2.CompilerTool)
	}
	reg, err := programs.Registry()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	for _, name := range reg.Names() {
		p, err := bmv2.Compile(context.Background(), reg.Lookup(name), bmv2.Options{Compiler: bmv2.CompilerTool, Switch: bmv2.CompilerTool, CacheDir: cache})
		if err != nil {
			t.Fatal(err)
		}
		n, err := p4rt.NewNames(p.P4Info)
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range reg.Lookup(name).P4Info.GetTables() {
			if _, err := n.Table(tb.GetPreamble().GetName()); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		again, err := bmv2.Compile(context.Background(), reg.Lookup(name), bmv2.Options{Compiler: bmv2.CompilerTool, Switch: bmv2.CompilerTool, CacheDir: cache})
		if err != nil || again.Dir != p.Dir || len(p.JSON) == 0 {
			t.Errorf("%s: recompiled to %s (was %s): %v", name, again.Dir, p.Dir, err)
		}
	}
}
