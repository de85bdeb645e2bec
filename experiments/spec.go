// Package experiments holds tracebed's experiment specs (the YAML files in
// this directory, embedded in the binary), their loader, and the runner that
// executes every (policy, scenario, seed) of a spec in parallel and writes
// results/<experiment>/.
//
// A spec names a kind of experiment; the kind (registered by the binary,
// never a global) reads the kind-specific sections — workload, policies,
// scenarios — and runs them. See docs/experiments.md.
package experiments

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/internal/ctxio"
	"github.com/tracebed/tracebed/internal/yamlx"
	"github.com/tracebed/tracebed/topologies"
)

// Substrates a spec may name.
var Substrates = []string{"sim", "netns"}

// MaxScale is the largest scale factor any spec may give; a kind may allow
// less (the far-memory kind does: its clock must hold the scaled run).
const MaxScale = 1e6

// Spec is a parsed experiment spec.
type Spec struct {
	Name        string
	Description string
	Kind        string
	Substrate   string
	Seeds       []int64
	Scale       float64
	// BMv2Scale, if not zero, is the scale factor of a netns run on bmv2
	// ('run --switch bmv2'), which forwards tens of times fewer frames per
	// second than the Go switch: a larger factor keeps the offered load
	// within what it can forward (docs/bmv2.md). Zero means Scale.
	BMv2Scale float64
	Default   bool // part of the suite `tracebed run` runs without arguments

	// Topology is the network, loaded from a file, a ready name, a
	// generator or an inline topology.
	Topology *topologies.Topology
	// TopologyNode is the raw topology section, for kinds that regenerate
	// the topology per scenario; nil when the spec has none.
	TopologyNode *yaml.Node
	// Trace is the trace path as written (kinds resolve it with ReadFile).
	Trace string

	// Workload is the kind-specific workload section (nil if absent).
	Workload *yaml.Node
	// Policies are the policy entries: a name, or a mapping with a name and
	// parameters.
	Policies []Entry
	// Scenarios are the scenario entries; a spec without scenarios has one
	// scenario named "default".
	Scenarios []Entry

	File string // path as given
	Hash string // SHA-256 of the file's bytes
	At   yamlx.Where

	readFile func(string) ([]byte, error)
	// ctx interrupts reads of the files the spec refers to (SetContext).
	ctx context.Context
}

// AtBMv2Scale returns the spec as it runs on bmv2: a shallow copy at its
// BMv2Scale, or the spec itself if it gives none.
func (s *Spec) AtBMv2Scale() *Spec {
	if s.BMv2Scale == 0 || s.BMv2Scale == s.Scale {
		return s
	}
	c := *s
	c.Scale = s.BMv2Scale
	return &c
}

// SetContext makes every read of a file the spec refers to (Find, ReadFile,
// Interruptible) fail once ctx is done: compiling a spec that converts a
// trace of gigabytes stops on SIGINT like a run does.
func (s *Spec) SetContext(ctx context.Context) { s.ctx = ctx }

// Err reports why the spec's context (SetContext) is done, or nil: checks
// of a kind that take long look at it between steps.
func (s *Spec) Err() error {
	if s.ctx == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// Interruptible returns open with its reader failing once the spec's
// context (SetContext) is done.
func (s *Spec) Interruptible(open func() (io.ReadCloser, error)) func() (io.ReadCloser, error) {
	if s.ctx == nil {
		return open
	}
	ctx := s.ctx
	return func() (io.ReadCloser, error) {
		rc, err := open()
		if err != nil {
			return nil, err
		}
		return ctxio.ReadCloser(ctx, rc), nil
	}
}

// Entry is one policy or scenario: a name, and for a mapping entry the node
// holding its parameters (the name key included).
type Entry struct {
	Name string
	Node *yaml.Node // nil for a bare name
	Pos  yamlx.Pos
	Path string // e.g. "policies[2]"
}

// Errorf returns an input error about a field of the spec.
func (s *Spec) Errorf(key, format string, args ...any) error {
	return s.At.Errorf(key, format, args...)
}

// ReadFile reads a file the spec refers to (a trace, say), found as Find
// finds it.
func (s *Spec) ReadFile(path string) ([]byte, error) {
	f, err := s.Find(path)
	if err != nil {
		return nil, err
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// RefFile is a file a spec refers to, as Find found it.
type RefFile struct {
	// Name is where it was found: a path on disk, or the path as written
	// for a file built into tracebed. Error messages use it.
	Name string
	// Size is its length in bytes.
	Size int64
	// Open reads it from the start; it may be called more than once.
	Open func() (io.ReadCloser, error)
}

// Find looks a file the spec refers to up: relative to the spec's
// directory first, then as given (relative to the working directory, or
// absolute), then among the files built into tracebed. It opens nothing:
// the caller reads it, as a stream, with the result's Open.
func (s *Spec) Find(path string) (RefFile, error) {
	for _, p := range s.candidates(path) {
		fi, err := os.Stat(p)
		if err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
			// A device or a pipe could block or never end.
			return RefFile{}, fmt.Errorf("%s: not a regular file (%v)", p, fi.Mode().Type())
		}
		if err == nil && !fi.IsDir() {
			p := p
			return RefFile{Name: p, Size: fi.Size(), Open: s.Interruptible(func() (io.ReadCloser, error) { return os.Open(p) })}, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return RefFile{}, fmt.Errorf("%s: %w", p, err)
		}
	}
	if s.readFile != nil {
		if data, err := s.readFile(path); err == nil {
			return RefFile{Name: path, Size: int64(len(data)), Open: s.Interruptible(func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(data)), nil
			})}, nil
		}
	}
	where := "next to " + s.File + ", in the working directory"
	if filepath.IsAbs(path) || s.File == "" {
		where = "on disk"
	}
	return RefFile{}, fmt.Errorf("%s: no such file (looked %s and in the files built into tracebed)", path, where)
}

// candidates are where a relative path of the spec's may be on disk: next
// to the spec, then as given.
func (s *Spec) candidates(path string) []string {
	if filepath.IsAbs(path) || s.File == "" {
		return []string{path}
	}
	return []string{filepath.Join(filepath.Dir(s.File), path), path}
}

// Glob returns the files on disk that match a pattern (path.Match syntax,
// such as "recordings/*.lackey"), sorted: relative to the spec's directory
// if anything matches there, else relative to the working directory.
func (s *Spec) Glob(pattern string) ([]string, error) {
	for _, p := range s.candidates(pattern) {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %v", pattern, err)
		}
		var files []string
		for _, f := range m {
			if fi, err := os.Stat(f); err == nil && !fi.IsDir() {
				files = append(files, f)
			}
		}
		if len(files) > 0 {
			slices.Sort(files)
			return files, nil
		}
	}
	return nil, fmt.Errorf("pattern %q matches no file (looked next to %s and in the working directory)", pattern, s.File)
}

type rawSpec struct {
	Name        string      `yaml:"name"`
	Description string      `yaml:"description"`
	Kind        string      `yaml:"kind,required"`
	Substrate   string      `yaml:"substrate"`
	Seeds       []int64     `yaml:"seeds"`
	Scale       float64     `yaml:"scale"`
	BMv2Scale   float64     `yaml:"bmv2_scale"`
	Default     bool        `yaml:"default"`
	Topology    *yaml.Node  `yaml:"topology"`
	Trace       string      `yaml:"trace"`
	Workload    *yaml.Node  `yaml:"workload"`
	Policies    *yaml.Node  `yaml:"policies,required"`
	Scenarios   *yaml.Node  `yaml:"scenarios"`
	At          yamlx.Where `yaml:"-"`
}

// ParseSpec parses an experiment spec and loads its topology. It checks the
// sections every spec shares; the kind checks the rest. readFile, if not
// nil, serves files built into the binary.
//
// With an input error it may still return the Spec, holding what was
// right (a section with a problem left out or empty), so that a validator
// can have the kind check the rest too and report every problem of the
// file at once; such a Spec must not be run.
func ParseSpec(file string, data []byte, readFile func(string) ([]byte, error)) (*Spec, error) {
	root, err := yamlx.Parse(file, data)
	if err != nil {
		return nil, err
	}
	var raw rawSpec
	raw.Scale = 1
	// Every section is checked, and every problem reported (errors.Join).
	var errs []error
	if err := yamlx.Decode(file, root, "", &raw); err != nil {
		if _, perr := yamlx.Pairs(file, root, ""); perr != nil {
			return nil, err // not a mapping: nothing to check further
		}
		errs = append(errs, err)
	}
	sum := sha256.Sum256(data)
	s := &Spec{
		Name: raw.Name, Description: raw.Description, Kind: raw.Kind,
		Substrate: raw.Substrate, Seeds: raw.Seeds, Scale: raw.Scale, BMv2Scale: raw.BMv2Scale, Default: raw.Default,
		TopologyNode: raw.Topology, Trace: raw.Trace, Workload: raw.Workload,
		File: file, Hash: hex.EncodeToString(sum[:]), At: raw.At, readFile: readFile,
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	if !nameOK(s.Name) {
		errs = append(errs, s.Errorf("name", "%q: want letters, digits, '_', '.' or '-' (it names the results directory)", truncateName(s.Name)))
	}
	if s.Substrate == "" {
		s.Substrate = "sim"
	}
	if !slices.Contains(Substrates, s.Substrate) {
		errs = append(errs, s.Errorf("substrate", "%q is not a substrate; want one of %s", truncateName(s.Substrate), strings.Join(Substrates, ", ")))
	}
	if len(s.Seeds) == 0 {
		s.Seeds = []int64{1}
	}
	for i, seed := range s.Seeds {
		if slices.Contains(s.Seeds[:i], seed) {
			errs = append(errs, s.Errorf("seeds", "seed %d is listed twice", seed))
			break
		}
	}
	if raw.Seeds != nil && len(raw.Seeds) == 0 {
		errs = append(errs, s.Errorf("seeds", "empty; list the seeds to run, or leave the field out (seed 1)"))
	}
	if s.Scale < 1 || s.Scale > MaxScale {
		errs = append(errs, s.Errorf("scale", "%g; the scale factor divides rates, volumes and memory and must be 1 to %g (kinds may allow less)", s.Scale, float64(MaxScale)))
	}
	if s.BMv2Scale != 0 && (s.BMv2Scale < 1 || s.BMv2Scale > MaxScale) {
		errs = append(errs, s.Errorf("bmv2_scale", "%g; the scale factor of runs on bmv2 must be 1 to %g (kinds may allow less), or leave the field out to use scale", s.BMv2Scale, float64(MaxScale)))
	}
	if raw.Topology != nil {
		top, err := LoadTopology(file, raw.Topology, "topology")
		if err != nil {
			errs = append(errs, err)
		}
		s.Topology = top
	}
	if raw.Policies == nil {
		// Missing: reported by Decode.
	} else if s.Policies, err = entries(file, raw.Policies, "policies"); err != nil {
		errs = append(errs, err)
	} else if len(s.Policies) == 0 {
		errs = append(errs, s.Errorf("policies", "empty; list the policies to compare"))
	}
	if raw.Scenarios == nil {
		s.Scenarios = []Entry{{Name: "default", Pos: s.At.Pos, Path: "scenarios"}}
	} else if s.Scenarios, err = entries(file, raw.Scenarios, "scenarios"); err != nil {
		errs = append(errs, err)
	} else if len(s.Scenarios) == 0 {
		errs = append(errs, s.Errorf("scenarios", "empty, so nothing would run; list the scenarios, or leave the field out (one scenario named default)"))
	}
	if len(errs) > 0 {
		return s, errors.Join(errs...)
	}
	return s, nil
}

// truncateName shortens a name for an error message: a spec may hold a
// megabyte where a name belongs.
func truncateName(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// LoadTopology reads a topology section of a spec: a file path or ready name
// ("leafspine"), a generator ({generate: fattree, k: 8}), or an inline
// topology ({name: …, topology: {nodes: …, links: …}}).
func LoadTopology(file string, n *yaml.Node, path string) (*topologies.Topology, error) {
	pos := yamlx.NodePos(file, n)
	switch n.Kind {
	case yaml.ScalarNode:
		name := n.Value
		if strings.TrimSpace(name) == "" {
			return nil, yamlx.Errorf(pos, path, "empty; want a topology file name, {generate: …} or an inline topology")
		}
		if !filepath.IsAbs(name) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(file), name)); err == nil {
				name = filepath.Join(filepath.Dir(file), name)
			}
		}
		top, err := topologies.Open(name)
		var ie *yamlx.Error
		if err != nil && (!errors.As(err, &ie) || ie.Pos.Line == 0) {
			// Not about a line of the topology (a directory, a device, a
			// file too large): about this field of the spec.
			return nil, yamlx.Errorf(pos, path, "%s", strings.TrimPrefix(err.Error(), "topology: "))
		}
		return top, err
	case yaml.MappingNode:
		pairs, err := yamlx.Pairs(file, n, path)
		if err != nil {
			return nil, err
		}
		for _, p := range pairs {
			if p.Key == "generate" {
				var params topologies.Params
				if err := yamlx.Decode(file, n, path, &params); err != nil {
					return nil, err
				}
				f, err := topologies.Generate(params)
				if err != nil {
					return nil, err
				}
				return f.Build(file)
			}
		}
		return topologies.BuildDecoded(file)(topologies.DecodeFile(file, n, path))
	}
	return nil, yamlx.Errorf(pos, path, "want a topology file name, {generate: …} or an inline topology")
}

func entries(file string, n *yaml.Node, path string) ([]Entry, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, yamlx.Errorf(yamlx.NodePos(file, n), path, "want a list")
	}
	var out []Entry
	var errs []error
	seen := make(map[string]Entry, len(n.Content))
	for i, c := range n.Content {
		e := Entry{Pos: yamlx.NodePos(file, c), Path: fmt.Sprintf("%s[%d]", path, i)}
		switch c.Kind {
		case yaml.ScalarNode:
			e.Name = c.Value
		case yaml.MappingNode:
			pairs, err := yamlx.Pairs(file, c, e.Path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, p := range pairs {
				if p.Key == "name" {
					e.Name = p.Value.Value
				}
			}
			e.Node = c
		default:
			errs = append(errs, yamlx.Errorf(e.Pos, e.Path, "want a name or a mapping with a name"))
			continue
		}
		if e.Name == "" {
			errs = append(errs, yamlx.Errorf(e.Pos, e.Path+".name", "missing"))
			continue
		}
		if !nameOK(e.Name) {
			errs = append(errs, yamlx.Errorf(e.Pos, e.Path+".name", "%q: want letters, digits, '_', '.' or '-'", truncateName(e.Name)))
			continue
		}
		if prev, dup := seen[e.Name]; dup {
			errs = append(errs, yamlx.Errorf(e.Pos, e.Path+".name", "%q is listed twice (first at line %d)", e.Name, prev.Pos.Line))
			continue
		}
		seen[e.Name] = e
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

func nameOK(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// DecodeEntry decodes an entry's parameters into v (a pointer to a struct
// with yaml tags), over the values already in v. The entry's name key is
// skipped. A bare-name entry leaves v unchanged.
func (s *Spec) DecodeEntry(e Entry, v any) error {
	if e.Node == nil {
		return nil
	}
	return yamlx.Decode(s.File, withoutKey(e.Node, "name"), e.Path, v)
}

// DecodeEntryWithout decodes an entry's parameters into v as DecodeEntry
// does, leaving out keys as well as the name (keys the kind reads itself,
// such as a policy's system).
func (s *Spec) DecodeEntryWithout(e Entry, v any, keys ...string) error {
	if e.Node == nil {
		return nil
	}
	n := withoutKey(e.Node, "name")
	for _, k := range keys {
		n = withoutKey(n, k)
	}
	return yamlx.Decode(s.File, n, e.Path, v)
}

// EntryScalar returns the scalar value of key in a mapping entry, and
// whether the entry sets it.
func EntryScalar(e Entry, key string) (string, bool) {
	v := valueOf(e.Node, key)
	if v == nil || v.Kind != yaml.ScalarNode {
		return "", v != nil
	}
	return v.Value, true
}

// DecodeWorkload decodes the workload section into v over its defaults.
func (s *Spec) DecodeWorkload(v any) error {
	if s.Workload == nil {
		return nil
	}
	return yamlx.Decode(s.File, s.Workload, "workload", v)
}

// withoutKey returns a copy of mapping n without key.
func withoutKey(n *yaml.Node, key string) *yaml.Node {
	c := *n
	c.Content = nil
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != key {
			c.Content = append(c.Content, n.Content[i], n.Content[i+1])
		}
	}
	return &c
}

// EntryError returns an input error about key of a scenario or policy entry:
// at the entry's own key if it sets it, else at the workload section's key if
// the value came from there, else (for trace) at the spec's own field, else
// at the entry.
func EntryError(s *Spec, e Entry, key, format string, args ...any) error {
	pos, field := EntryWhere(s, e, key)
	return yamlx.Errorf(pos, field, format, args...)
}

// EntryWhere locates key of a scenario or policy entry as EntryError
// does: the position and the dotted path of the field.
//
// A key may name a field inside the entry's value, such as "job_list[2]"
// or "roles.hosts[0]": the deepest part of it the YAML holds is located.
// The default scenario of a spec without scenarios takes its values from
// the workload section, so its fields are located there.
func EntryWhere(s *Spec, e Entry, key string) (yamlx.Pos, string) {
	if v := lookup(e.Node, key); v != nil {
		return yamlx.NodePos(s.File, v), e.Path + "." + key
	}
	if v := lookup(s.Workload, key); v != nil {
		return yamlx.NodePos(s.File, v), "workload." + key
	}
	if key == "trace" && s.At.Has(key) {
		return s.At.At(key), key // the spec's own trace, which scenarios share
	}
	if e.Node == nil && e.Path == "scenarios" && s.Workload != nil {
		return yamlx.NodePos(s.File, s.Workload), "workload." + key
	}
	return e.Pos, e.Path + "." + key
}

// lookup finds the value at key in n, where key is a field ("load") or a
// path of fields and list indices ("job_list[2].arrival"): the deepest
// value along the path that n holds, or nil if n does not hold its first
// field.
func lookup(n *yaml.Node, key string) *yaml.Node {
	field, path, _ := strings.Cut(key, ".")
	field, index, _ := strings.Cut(field, "[")
	v := valueOf(n, field)
	if v == nil {
		return nil
	}
	for index != "" {
		idx, rest, _ := strings.Cut(index, "]")
		i, err := strconv.Atoi(idx)
		if err != nil || v.Kind != yaml.SequenceNode || i < 0 || i >= len(v.Content) {
			return v
		}
		v, index = v.Content[i], strings.TrimPrefix(rest, "[")
	}
	if path != "" {
		if w := lookup(v, path); w != nil {
			return w
		}
	}
	return v
}

func valueOf(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
