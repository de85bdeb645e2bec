package analysis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ShardSchema identifies a shard file: the results of one shard of a
// sharded run (tracebed run --shard I/N).
const ShardSchema = "tracebed.shard/v1"

// ShardFile is the content of shard-I-of-N.json. Its Results hold the
// shard's runs only, under the header every shard of the sweep shares
// (spec, spec hash, seeds, version, commit, …); MergeShards checks the
// headers agree and joins the runs into the results.json an unsharded run
// would have written.
type ShardFile struct {
	Schema string `json:"schema"`
	Index  int    `json:"index"` // from 0
	Count  int    `json:"count"`
	// Cost is the estimated cost of this shard's runs and TotalCost that
	// of every run of the spec (experiments.Coster units), as planned.
	Cost      float64 `json:"cost"`
	TotalCost float64 `json:"total_cost"`
	// Provenance says how this shard ran (command, machine, wall time).
	Provenance *Provenance `json:"provenance,omitempty"`
	Results    Results     `json:"results"`

	Path string `json:"-"` // where it was read from
}

// ShardFileName is the name of the file of shard index of count.
func ShardFileName(index, count int) string {
	return fmt.Sprintf("shard-%d-of-%d.json", index, count)
}

var shardName = regexp.MustCompile(`^shard-\d+-of-\d+\.json$`)

// Marshal returns the file's JSON encoding (indented, keys sorted).
func (f *ShardFile) Marshal() ([]byte, error) {
	f.Schema = ShardSchema
	if err := f.check(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (f *ShardFile) check() error {
	if f.Count < 1 || f.Index < 0 || f.Index >= f.Count {
		return fmt.Errorf("shard %d of %d: want 0 ≤ index < count", f.Index, f.Count)
	}
	return f.Results.Validate()
}

// WriteShard writes f to dir/<experiment>/shard-I-of-N.json and returns the
// path. The file appears whole or not at all (it is renamed into place),
// so a merge waiting for shards never reads half a file.
func WriteShard(dir string, f *ShardFile) (string, error) {
	data, err := f.Marshal()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, f.Results.Experiment)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(out, ShardFileName(f.Index, f.Count))
	tmp, err := os.CreateTemp(out, ".shard-*.tmp")
	if err != nil {
		return "", err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return "", err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, nil
}

// ReadShard loads a shard file.
func ReadShard(path string) (*ShardFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseShard(path, data)
}

// ParseShard decodes a shard file; name prefixes every error.
func ParseShard(name string, data []byte) (*ShardFile, error) {
	schema, version, err := ProbeSchema(name, data)
	if err != nil {
		return nil, err
	}
	if schema != ShardSchema {
		return nil, fmt.Errorf("%s: %s", name, SchemaMismatch(schema, version, ShardSchema, "shard"))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f ShardFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %v", name, JSONError(data, err))
	}
	if f.Results.Schema != Schema {
		return nil, fmt.Errorf("%s: results: %s", name, SchemaMismatch(f.Results.Schema, version, Schema, "results"))
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	f.Path = name
	return &f, nil
}

// FindShards returns the shard files (shard-I-of-N.json) named by args or
// found in the directories args name, at any depth, sorted and without
// duplicates. A directory without any is an error.
func FindShards(args []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		abs, err := filepath.Abs(p)
		if err != nil {
			abs = p
		}
		if !seen[abs] {
			seen[abs] = true
			out = append(out, filepath.Clean(p))
		}
	}
	for _, arg := range args {
		fi, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			add(arg)
			continue
		}
		n := len(out)
		err = filepath.WalkDir(arg, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && shardName.MatchString(d.Name()) {
				add(p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(out) == n {
			return nil, fmt.Errorf("%s: no shard files (shard-I-of-N.json) in it or below; write them with 'tracebed run --shard I/N --out %s SPEC'", arg, arg)
		}
	}
	slices.Sort(out)
	return out, nil
}

// MergeShards joins the shards of one experiment into the results of the
// whole sweep, byte for byte what an unsharded run writes. It refuses
// shards that disagree on anything but their runs — another spec, spec
// hash, commit, version, seeds, policies, scenarios or number of shards —
// naming the field and the files; and a shard missing or given twice, or a
// run missing or run by two shards, naming it.
func MergeShards(shards []*ShardFile) (*Results, error) {
	if len(shards) == 0 {
		return nil, errors.New("no shards to merge")
	}
	first := shards[0]
	exp := first.Results.Experiment
	for _, s := range shards[1:] {
		if s.Results.Experiment != exp {
			return nil, fmt.Errorf("%s is of experiment %s, %s of %s; merge one experiment at a time", s.Path, s.Results.Experiment, first.Path, exp)
		}
		if s.Count != first.Count {
			return nil, fmt.Errorf("%s: shards of different sweeps: %s is shard %d/%d, %s is shard %d/%d", exp, first.Path, first.Index, first.Count, s.Path, s.Index, s.Count)
		}
		if field, a, b := headerDiff(&first.Results, &s.Results); field != "" {
			return nil, fmt.Errorf("%s: shards of different sweeps: %s differs: %s has %s, %s has %s", exp, field, first.Path, a, s.Path, b)
		}
	}
	byIndex := map[int]*ShardFile{}
	for _, s := range shards {
		if o := byIndex[s.Index]; o != nil {
			return nil, fmt.Errorf("%s: shard %d/%d is given twice: %s and %s", exp, s.Index, s.Count, o.Path, s.Path)
		}
		byIndex[s.Index] = s
	}
	var missing []string
	for i := range first.Count {
		if byIndex[i] == nil {
			missing = append(missing, fmt.Sprintf("%d/%d", i, first.Count))
		}
	}
	if len(missing) > 0 {
		what := "shard " + missing[0] + " is"
		if len(missing) > 1 {
			what = "shards " + strings.Join(missing, ", ") + " are"
		}
		return nil, fmt.Errorf("%s: %s missing (have %d of %d shards)", exp, what, len(byIndex), first.Count)
	}
	res := first.Results
	res.Runs = nil
	type key struct {
		scenario, policy string
		seed             int64
	}
	from := map[key]*ShardFile{}
	for i := range first.Count {
		s := byIndex[i]
		for _, run := range s.Results.Runs {
			k := key{run.Scenario, run.Policy, run.Seed}
			if o := from[k]; o != nil {
				return nil, fmt.Errorf("%s: run %s/%s/seed %d is in two shards: %s and %s", exp, run.Scenario, run.Policy, run.Seed, o.Path, s.Path)
			}
			from[k] = s
			res.Runs = append(res.Runs, run)
		}
	}
	for _, sc := range res.Scenarios {
		for _, p := range res.Policies {
			for _, seed := range res.Seeds {
				if from[key{sc, p, seed}] == nil {
					return nil, fmt.Errorf("%s: run %s/%s/seed %d is in no shard", exp, sc, p, seed)
				}
			}
		}
	}
	res.Sort()
	if err := res.Validate(); err != nil {
		return nil, fmt.Errorf("%s: merged results: %w", exp, err)
	}
	return &res, nil
}

// headerDiff compares everything in two results but the runs and returns
// the first field (by its JSON name) that differs, with both values; ""
// when none does.
func headerDiff(a, b *Results) (field, va, vb string) {
	ra, rb := reflect.ValueOf(*a), reflect.ValueOf(*b)
	t := ra.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "Runs" {
			continue
		}
		x, y := ra.Field(i).Interface(), rb.Field(i).Interface()
		if reflect.DeepEqual(x, y) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name, show(x), show(y)
	}
	return "", "", ""
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const limit = 120
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}

// MergeProvenance describes res, merged from shards: command is the
// merge's command line, and the shards' own records are kept in Shards. The
// start is the earliest shard's, the wall time runs from it to the end of
// the last shard to finish, Parallel is summed over the shards, and the
// machine is the first shard's (Shards has every one).
func MergeProvenance(command string, res *Results, shards []*ShardFile) Provenance {
	p := Provenance{Command: command, Experiment: res.Experiment, Runs: len(res.Runs), Version: res.Version, Commit: res.Commit}
	var start, end time.Time
	for _, s := range shards {
		sp := s.Provenance
		if sp == nil {
			continue
		}
		if len(p.Shards) == 0 {
			p.Machine = sp.Machine
		}
		p.Shards = append(p.Shards, *sp)
		p.Parallel += sp.Parallel
		t, err := time.Parse(time.RFC3339, sp.Started)
		if err != nil {
			continue
		}
		if start.IsZero() || t.Before(start) {
			start = t
		}
		if e := t.Add(time.Duration(sp.WallS * float64(time.Second))); e.After(end) {
			end = e
		}
	}
	if !start.IsZero() {
		p.Started = start.UTC().Format(time.RFC3339)
		p.WallS = float64(end.Sub(start).Round(time.Millisecond)) / float64(time.Second)
	}
	return p
}
