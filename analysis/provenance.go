package analysis

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// ProvenanceSchema identifies provenance.json.
const ProvenanceSchema = "tracebed.provenance/v1"

// ProvenanceFile is the name of the file, next to results.json, that says
// how and where the results were made. It holds what results.json must not
// (the wall clock, the machine, the command line), so results.json stays
// byte-identical across machines and runs.
const ProvenanceFile = "provenance.json"

// Provenance records how a results directory was produced.
type Provenance struct {
	Schema     string  `json:"schema"`
	Command    string  `json:"command"` // the command line, shell-quoted, program name "tracebed"
	Experiment string  `json:"experiment"`
	Started    string  `json:"started"` // RFC 3339, UTC
	WallS      float64 `json:"wall_s"`  // wall-clock time of the experiment's runs
	Runs       int     `json:"runs"`
	// Partial says the execution stopped early (interrupted): results.json
	// holds the runs that finished and says why (its partial field).
	Partial  bool    `json:"partial,omitempty"`
	Parallel int     `json:"parallel"`
	Version  string  `json:"tracebed_version"`
	Commit   string  `json:"commit,omitempty"`
	Machine  Machine `json:"machine"`
	// Shard is "I/N" for one shard of a sharded run (tracebed run
	// --shard); Shards, for results merged from shards (tracebed merge),
	// are the shards' own records, in shard order.
	Shard  string       `json:"shard,omitempty"`
	Shards []Provenance `json:"shards,omitempty"`
}

// Machine describes the computer a run or benchmark ran on.
type Machine struct {
	OS        string  `json:"os"`
	Arch      string  `json:"arch"`
	Kernel    string  `json:"kernel,omitempty"`
	Distro    string  `json:"distro,omitempty"`
	CPU       string  `json:"cpu,omitempty"`
	Cores     int     `json:"cores"`      // logical CPUs
	MaxProcs  int     `json:"gomaxprocs"` // CPUs Go used
	MemoryGiB float64 `json:"memory_gib,omitempty"`
	Go        string  `json:"go"`
}

// CurrentMachine describes this computer, from the Go runtime and, on
// Linux, /proc and /etc/os-release. Fields it cannot read stay empty.
func CurrentMachine() Machine {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, Cores: runtime.NumCPU(), MaxProcs: runtime.GOMAXPROCS(0), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if v := fileField("/proc/cpuinfo", "model name", ':'); v != "" {
		m.CPU = v
	}
	if v := fileField("/proc/meminfo", "MemTotal", ':'); v != "" {
		if kb, err := strconv.ParseFloat(strings.TrimSuffix(v, " kB"), 64); err == nil {
			m.MemoryGiB = float64(int(kb/1024/1024*10+0.5)) / 10
		}
	}
	if v := fileField("/etc/os-release", "PRETTY_NAME", '='); v != "" {
		m.Distro = strings.Trim(v, `"`)
	}
	return m
}

// String is a one-line description for reports.
func (m Machine) String() string {
	parts := []string{}
	if m.CPU != "" {
		parts = append(parts, m.CPU)
	}
	cores := fmt.Sprintf("%d logical CPUs", m.Cores)
	if m.MaxProcs != 0 && m.MaxProcs != m.Cores {
		cores += fmt.Sprintf(" (GOMAXPROCS %d)", m.MaxProcs)
	}
	parts = append(parts, cores)
	if m.MemoryGiB > 0 {
		parts = append(parts, fmt.Sprintf("%g GiB RAM", m.MemoryGiB))
	}
	osName := m.OS + "/" + m.Arch
	if m.Distro != "" {
		osName = m.Distro + " " + m.Arch
	}
	if m.Kernel != "" {
		osName += ", kernel " + m.Kernel
	}
	parts = append(parts, osName, m.Go)
	return strings.Join(parts, ", ")
}

// fileField returns the value of the first line "key<sep>value" of a file.
func fileField(path, key string, sep byte) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), string(sep))
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WriteProvenance writes dir/provenance.json.
func WriteProvenance(dir string, p Provenance) error {
	p.Schema = ProvenanceSchema
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ProvenanceFile), append(b, '\n'), 0o644)
}

// ReadProvenance reads dir/provenance.json; it returns an error wrapping
// fs.ErrNotExist when the directory has none.
func ReadProvenance(dir string) (*Provenance, error) {
	path := filepath.Join(dir, ProvenanceFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	schema, version, err := ProbeSchema(path, data)
	if err != nil {
		return nil, err
	}
	if schema != ProvenanceSchema {
		return nil, fmt.Errorf("%s: %s", path, SchemaMismatch(schema, version, ProvenanceSchema, "provenance"))
	}
	var p Provenance
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%s: %v", path, JSONError(data, err))
	}
	return &p, nil
}

// ShellQuote joins args into a command line a POSIX shell reads back as
// the same arguments.
func ShellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// ShardSummary describes the shards of merged results: how many, on how
// many machines, and the longest shard's wall time.
func (p *Provenance) ShardSummary() string {
	var machines []string
	longest := 0.0
	for _, s := range p.Shards {
		if m := s.Machine.String(); !slices.Contains(machines, m) {
			machines = append(machines, m)
		}
		longest = max(longest, s.WallS)
	}
	return fmt.Sprintf("%d shards merged (longest %.1f s) on %d machine(s); provenance.json lists each", len(p.Shards), longest, len(machines))
}
