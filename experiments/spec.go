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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/internal/yamlx"
	"github.com/tracebed/tracebed/topologies"
)

// Substrates a spec may name.
var Substrates = []string{"sim", "netns"}

// Spec is a parsed experiment spec.
type Spec struct {
	Name        string
	Description string
	Kind        string
	Substrate   string
	Seeds       []int64
	Scale       float64
	Default     bool // part of the suite `tracebed run` runs without arguments

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

// ReadFile reads a file the spec refers to (a trace, say): as given, then
// relative to the spec's directory, then from the files embedded in the
// binary.
func (s *Spec) ReadFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return data, err
	}
	if !filepath.IsAbs(path) {
		if data, err := os.ReadFile(filepath.Join(filepath.Dir(s.File), path)); err == nil {
			return data, nil
		}
	}
	if s.readFile != nil {
		if data, err := s.readFile(path); err == nil {
			return data, nil
		}
	}
	return nil, fmt.Errorf("%s: no such file (looked in the working directory, next to %s and in the files built into tracebed)", path, s.File)
}

type rawSpec struct {
	Name        string      `yaml:"name"`
	Description string      `yaml:"description"`
	Kind        string      `yaml:"kind,required"`
	Substrate   string      `yaml:"substrate"`
	Seeds       []int64     `yaml:"seeds"`
	Scale       float64     `yaml:"scale"`
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
func ParseSpec(file string, data []byte, readFile func(string) ([]byte, error)) (*Spec, error) {
	root, err := yamlx.Parse(file, data)
	if err != nil {
		return nil, err
	}
	var raw rawSpec
	raw.Scale = 1
	if err := yamlx.Decode(file, root, "", &raw); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	s := &Spec{
		Name: raw.Name, Description: raw.Description, Kind: raw.Kind,
		Substrate: raw.Substrate, Seeds: raw.Seeds, Scale: raw.Scale, Default: raw.Default,
		TopologyNode: raw.Topology, Trace: raw.Trace, Workload: raw.Workload,
		File: file, Hash: hex.EncodeToString(sum[:]), At: raw.At, readFile: readFile,
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	if !nameOK(s.Name) {
		return nil, s.Errorf("name", "%q: want letters, digits, '_', '.' or '-' (it names the results directory)", s.Name)
	}
	if s.Substrate == "" {
		s.Substrate = "sim"
	}
	if !slices.Contains(Substrates, s.Substrate) {
		return nil, s.Errorf("substrate", "%q is not a substrate; want one of %s", s.Substrate, strings.Join(Substrates, ", "))
	}
	if len(s.Seeds) == 0 {
		s.Seeds = []int64{1}
	}
	for i, seed := range s.Seeds {
		if slices.Contains(s.Seeds[:i], seed) {
			return nil, s.Errorf("seeds", "seed %d is listed twice", seed)
		}
	}
	if s.Scale < 1 {
		return nil, s.Errorf("scale", "%g; the scale factor divides rates, volumes and memory and must be 1 or more", s.Scale)
	}
	if raw.Topology != nil {
		top, err := LoadTopology(file, raw.Topology, "topology")
		if err != nil {
			return nil, err
		}
		s.Topology = top
	}
	if s.Policies, err = entries(file, raw.Policies, "policies"); err != nil {
		return nil, err
	}
	if len(s.Policies) == 0 {
		return nil, s.Errorf("policies", "empty; list the policies to compare")
	}
	if raw.Scenarios == nil {
		s.Scenarios = []Entry{{Name: "default", Pos: s.At.Pos, Path: "scenarios"}}
	} else if s.Scenarios, err = entries(file, raw.Scenarios, "scenarios"); err != nil {
		return nil, err
	}
	return s, nil
}

// LoadTopology reads a topology section of a spec: a file path or ready name
// ("leafspine"), a generator ({generate: fattree, k: 8}), or an inline
// topology ({name: …, topology: {nodes: …, links: …}}).
func LoadTopology(file string, n *yaml.Node, path string) (*topologies.Topology, error) {
	pos := yamlx.NodePos(file, n)
	switch n.Kind {
	case yaml.ScalarNode:
		name := n.Value
		if !filepath.IsAbs(name) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(file), name)); err == nil {
				name = filepath.Join(filepath.Dir(file), name)
			}
		}
		top, err := topologies.Open(name)
		if err != nil && !yamlx.IsInputError(err) {
			return nil, yamlx.Errorf(pos, path, "%v", err)
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
		f, err := topologies.DecodeFile(file, n, path)
		if err != nil {
			return nil, err
		}
		return f.Build(file)
	}
	return nil, yamlx.Errorf(pos, path, "want a topology file name, {generate: …} or an inline topology")
}

func entries(file string, n *yaml.Node, path string) ([]Entry, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, yamlx.Errorf(yamlx.NodePos(file, n), path, "want a list")
	}
	var out []Entry
	for i, c := range n.Content {
		e := Entry{Pos: yamlx.NodePos(file, c), Path: fmt.Sprintf("%s[%d]", path, i)}
		switch c.Kind {
		case yaml.ScalarNode:
			e.Name = c.Value
		case yaml.MappingNode:
			pairs, err := yamlx.Pairs(file, c, e.Path)
			if err != nil {
				return nil, err
			}
			for _, p := range pairs {
				if p.Key == "name" {
					e.Name = p.Value.Value
				}
			}
			e.Node = c
		default:
			return nil, yamlx.Errorf(e.Pos, e.Path, "want a name or a mapping with a name")
		}
		if e.Name == "" {
			return nil, yamlx.Errorf(e.Pos, e.Path+".name", "missing")
		}
		if !nameOK(e.Name) {
			return nil, yamlx.Errorf(e.Pos, e.Path+".name", "%q: want letters, digits, '_', '.' or '-'", e.Name)
		}
		for _, prev := range out {
			if prev.Name == e.Name {
				return nil, yamlx.Errorf(e.Pos, e.Path+".name", "%q is listed twice (first at line %d)", e.Name, prev.Pos.Line)
			}
		}
		out = append(out, e)
	}
	return out, nil
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
// the value came from there, else at the entry.
func EntryError(s *Spec, e Entry, key, format string, args ...any) error {
	if v := valueOf(e.Node, key); v != nil {
		return yamlx.Errorf(yamlx.NodePos(s.File, v), e.Path+"."+key, format, args...)
	}
	if v := valueOf(s.Workload, key); v != nil {
		return yamlx.Errorf(yamlx.NodePos(s.File, v), "workload."+key, format, args...)
	}
	return yamlx.Errorf(e.Pos, e.Path+"."+key, format, args...)
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
