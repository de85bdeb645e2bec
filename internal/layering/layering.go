// Package layering states how tracebed's packages may import each other and
// checks a module's import graph, as 'go list -json' prints it, against
// that statement. docs/contributing.md draws the same layers; the test of
// this package checks the module itself, for every operating system the
// module builds for.
//
// From the top: the command (cmd) may import everything; experiments and
// workloads import the systems they compare; systems import data planes
// (p4); data planes import the engine (emulator); everything imports
// internal. Topologies and traces are data, and the results schema
// (analysis) is data about runs: each imports only internal, so any layer
// may read them. Figures and benchmark reports (analysis/...) are the
// command's, and only they and the command may depend on the plotting and
// benchmark-format modules.
package layering

import (
	"fmt"
	"slices"
	"strings"
)

// Layer is a set of packages of the module and what they may import.
type Layer struct {
	// Name names the layer in MayImport lists and in violations.
	Name string
	// Packages are the layer's import paths relative to the module path:
	// "emulator" is that package alone, "emulator/..." every package
	// below it (not emulator itself).
	Packages []string
	// MayImport lists the layers whose packages the layer's packages may
	// import (the layer itself included, when its packages import each
	// other).
	MayImport []string
	// Avoid lists import path prefixes of other modules that no package of
	// the layer may depend on, even indirectly.
	Avoid []string
	// Rule is the layer's rule in one sentence, for people.
	Rule string
}

// Tracebed returns tracebed's layers, from the bottom up.
func Tracebed() []Layer {
	// heavy are the modules only the command and its reports need:
	// plotting and the benchmark format.
	heavy := []string{"gonum.org/v1/plot", "golang.org/x/perf"}
	return []Layer{
		{Name: "internal", Packages: []string{"internal/..."}, MayImport: []string{"internal"}, Avoid: heavy,
			Rule: "internal holds small helpers (units, strict YAML) that know nothing of tracebed's domain."},
		{Name: "data", Packages: []string{"topologies", "topologies/...", "traces/..."}, MayImport: []string{"internal", "data"}, Avoid: heavy,
			Rule: "Topologies and traces are data: they parse, generate and check files and import neither the engine nor workloads."},
		{Name: "results", Packages: []string{"analysis"}, MayImport: []string{"internal"}, Avoid: heavy,
			Rule: "analysis is the results schema every experiment writes (results.json, tables, shards, provenance): data about runs, with no plotting."},
		{Name: "reports", Packages: []string{"analysis/..."}, MayImport: []string{"internal", "results", "reports"},
			Rule: "Figures, reports and benchmark files build on the results schema; only the command uses them."},
		{Name: "engine", Packages: []string{"emulator", "emulator/..."}, MayImport: []string{"internal", "data", "engine"}, Avoid: heavy,
			Rule: "emulator knows no data plane and no policy: pipelines, programs and their registry are handed in (emulator/dataplane)."},
		{Name: "dataplanes", Packages: []string{"p4", "p4/...", "wireshark"}, MayImport: []string{"internal", "data", "engine", "dataplanes"}, Avoid: heavy,
			Rule: "p4 holds each data plane as a P4 program beside its Go twin, built on the engine's contracts, with no policy; wireshark dissects their headers."},
		{Name: "systems", Packages: []string{"systems/..."}, MayImport: []string{"internal", "data", "engine", "dataplanes", "systems"}, Avoid: heavy,
			Rule: "systems holds the policies compared, as controllers and sans-IO agents over the data planes."},
		{Name: "experiments", Packages: []string{"experiments", "experiments/...", "workloads/...", "deploy"},
			MayImport: []string{"internal", "data", "results", "engine", "dataplanes", "systems", "experiments"}, Avoid: heavy,
			Rule: "experiments and workloads run the systems on a testbed and report results; they never reach the command."},
		{Name: "cmd", Packages: []string{"cmd/...", "labs"}, MayImport: []string{"internal", "data", "results", "reports", "engine", "dataplanes", "systems", "experiments", "cmd"},
			Rule: "cmd/tracebed assembles everything: the kinds of experiments, the data planes' registry, the reports; labs drive the command as students do."},
	}
}

// Package is what Check reads of one package: the fields of
// 'go list -json' of the same names.
type Package struct {
	ImportPath   string
	Imports      []string // non-test imports
	TestImports  []string // imports of the package's _test files
	XTestImports []string // imports of its external (package x_test) tests
	Deps         []string // every package the non-test package depends on
}

// Violation is an import (or a dependency) a layer does not allow.
type Violation struct {
	From, To string // import paths
	How      string // "imports", "test imports" or "depends on"
	Why      string
}

func (v Violation) String() string { return fmt.Sprintf("%s %s %s: %s", v.From, v.How, v.To, v.Why) }

// Check checks the packages of module in pkgs against layers. Every
// package of the module must belong to a layer; imports of packages outside
// the module are not checked, dependencies of the layers' Avoid lists are.
// Violations come in the order of pkgs.
func Check(module string, pkgs []Package, layers []Layer) []Violation {
	byName := map[string]*Layer{}
	for i := range layers {
		byName[layers[i].Name] = &layers[i]
	}
	var out []Violation
	for _, p := range pkgs {
		rel, ok := relative(module, p.ImportPath)
		if !ok {
			continue
		}
		l := layerOf(layers, rel)
		if l == nil {
			out = append(out, Violation{From: p.ImportPath, How: "is", Why: "in no layer (add it to layering.Tracebed and docs/contributing.md)"})
			continue
		}
		check := func(how string, imports []string) {
			for _, imp := range imports {
				irel, ok := relative(module, imp)
				if !ok {
					continue
				}
				il := layerOf(layers, irel)
				switch {
				case il == nil:
					out = append(out, Violation{From: p.ImportPath, To: imp, How: how, Why: "the imported package is in no layer"})
				case !slices.Contains(l.MayImport, il.Name):
					out = append(out, Violation{From: p.ImportPath, To: imp, How: how,
						Why: fmt.Sprintf("layer %s may import %s, not %s", l.Name, strings.Join(l.MayImport, ", "), il.Name)})
				}
			}
		}
		check("imports", p.Imports)
		check("test imports", p.TestImports)
		check("test imports", p.XTestImports)
		for _, a := range l.Avoid {
			i := slices.IndexFunc(p.Deps, func(d string) bool { return d == a || strings.HasPrefix(d, a+"/") })
			if i >= 0 {
				out = append(out, Violation{From: p.ImportPath, To: p.Deps[i], How: "depends on",
					Why: fmt.Sprintf("layer %s must not depend on %s", l.Name, a)})
			}
		}
	}
	return out
}

// relative returns path relative to module, and whether it is inside it.
func relative(module, path string) (string, bool) {
	if path == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// layerOf returns the layer of the package at rel, or nil.
func layerOf(layers []Layer, rel string) *Layer {
	for i := range layers {
		for _, pat := range layers[i].Packages {
			if base, ok := strings.CutSuffix(pat, "/..."); ok {
				if strings.HasPrefix(rel, base+"/") {
					return &layers[i]
				}
			} else if rel == pat {
				return &layers[i]
			}
		}
	}
	return nil
}
