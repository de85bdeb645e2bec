package analysis

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// split deals the runs of res out to n shard files, run i to shard
// perm[i] mod n.
func split(t *testing.T, res *Results, n int, rng *rand.Rand) []*ShardFile {
	t.Helper()
	shards := make([]*ShardFile, n)
	for i := range shards {
		h := *res
		h.Runs = nil
		shards[i] = &ShardFile{Schema: ShardSchema, Index: i, Count: n, Results: h, Path: filepath.Join("s", ShardFileName(i, n))}
	}
	for _, r := range res.Runs {
		s := shards[rng.IntN(n)]
		s.Results.Runs = append(s.Results.Runs, r)
	}
	return shards
}

// TestMergeShardsIsTheWhole: however the runs of a results file are dealt
// out to shards (and in whatever order the shards come), the merge
// marshals to the same bytes.
func TestMergeShardsIsTheWhole(t *testing.T) {
	for _, name := range []string{"ina", "farmem", "incast"} {
		res, err := Read(filepath.Join("testdata", name+".results.json"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := res.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for _, n := range []int{1, 2, 3, 7, len(res.Runs) + 2} {
			shards := split(t, res, n, rng)
			rng.Shuffle(len(shards), func(i, j int) { shards[i], shards[j] = shards[j], shards[i] })
			// Each shard goes through its file and back.
			for i, s := range shards {
				data, err := s.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				if shards[i], err = ParseShard(s.Path, data); err != nil {
					t.Fatal(err)
				}
			}
			merged, err := MergeShards(shards)
			if err != nil {
				t.Fatalf("%s in %d shards: %v", name, n, err)
			}
			got, err := merged.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s in %d shards: the merge differs from the whole", name, n)
			}
		}
	}
}

func TestMergeShardsRefuses(t *testing.T) {
	res, err := Read(filepath.Join("testdata", "ina.results.json"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func([]*ShardFile) []*ShardFile
		want   string
	}{
		{"missing", func(s []*ShardFile) []*ShardFile { return append(s[:1], s[2:]...) }, "shard 1/3 is missing"},
		{"twice", func(s []*ShardFile) []*ShardFile {
			c := *s[2]
			c.Path = "other/shard-2-of-3.json"
			return append(s, &c)
		}, "shard 2/3 is given twice: s/shard-2-of-3.json and other/shard-2-of-3.json"},
		{"commit", func(s []*ShardFile) []*ShardFile { s[1].Results.Commit = "abc"; return s }, "commit differs"},
		{"version", func(s []*ShardFile) []*ShardFile { s[1].Results.Version = "9.9"; return s }, "tracebed_version differs"},
		{"seeds", func(s []*ShardFile) []*ShardFile { s[2].Results.Seeds = []int64{1, 2, 4}; return s }, `seeds differs: s/shard-0-of-3.json has [`},
		{"metrics", func(s []*ShardFile) []*ShardFile { s[2].Results.Metrics = s[2].Results.Metrics[1:]; return s }, "metrics differs"},
		{"experiment", func(s []*ShardFile) []*ShardFile { s[1].Results.Experiment = "other"; return s }, "merge one experiment at a time"},
		{"count", func(s []*ShardFile) []*ShardFile { s[1].Count = 4; return s }, "shards of different sweeps"},
		{"lost run", func(s []*ShardFile) []*ShardFile {
			for _, f := range s {
				if len(f.Results.Runs) > 0 {
					f.Results.Runs = f.Results.Runs[1:]
					break
				}
			}
			return s
		}, "is in no shard"},
		{"run twice", func(s []*ShardFile) []*ShardFile {
			s[0].Results.Runs = append(s[0].Results.Runs, s[1].Results.Runs[0])
			return s
		}, "is in two shards"},
		{"none", func([]*ShardFile) []*ShardFile { return nil }, "no shards"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shards := []*ShardFile{}
			for i := range 3 {
				h := *res
				h.Runs = nil
				for k, r := range res.Runs {
					if k%3 == i {
						h.Runs = append(h.Runs, r)
					}
				}
				shards = append(shards, &ShardFile{Index: i, Count: 3, Results: h, Path: filepath.Join("s", ShardFileName(i, 3))})
			}
			_, err := MergeShards(tt.change(shards))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFindShards(t *testing.T) {
	dir := t.TempDir()
	res, err := Read(filepath.Join("testdata", "incast.results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i, sub := range []string{"a", "b/c"} {
		p, err := WriteShard(filepath.Join(dir, sub), &ShardFile{Index: i, Count: 2, Results: *res})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "notes.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FindShards([]string{dir, paths[0]})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != paths[0] || got[1] != paths[1] {
		t.Errorf("FindShards = %q, want %q", got, paths)
	}
	if _, err := FindShards([]string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no shard files") {
		t.Errorf("empty directory: %v", err)
	}
	// No temporary file is left beside the shards.
	entries, _ := os.ReadDir(filepath.Join(dir, "a", res.Experiment))
	if len(entries) != 1 {
		t.Errorf("%d files in the shard's directory, want the shard alone", len(entries))
	}
}

func TestParseShardErrors(t *testing.T) {
	res, _ := os.ReadFile(filepath.Join("testdata", "incast.results.json"))
	tests := []struct {
		data, want string
	}{
		{string(res), "not a shard file"},
		{`{"schema": "tracebed.shard/v1", "index": 0, "count": 1, "results": {"schema": "tracebed.results/v9"}}`, "results: "},
		{`{"schema": "tracebed.shard/v1", "index": 3, "count": 2, "results": {"schema": "tracebed.results/v1"}}`, "shard 3 of 2"},
		{`{"schema": "tracebed.shard/v1", "extra": 1}`, "unknown field"},
		{`[]`, "not a tracebed file"},
	}
	for _, tt := range tests {
		_, err := ParseShard("x.json", []byte(tt.data))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "x.json") {
			t.Errorf("%.60s: error %v, want one starting x.json and containing %q", tt.data, err, tt.want)
		}
	}
}

func TestMergeProvenance(t *testing.T) {
	res := &Results{Experiment: "e", Version: "v", Commit: "c", Runs: make([]Run, 5)}
	shards := []*ShardFile{
		{Index: 0, Provenance: &Provenance{Shard: "0/2", Started: "2026-01-01T10:00:00Z", WallS: 30, Parallel: 2, Machine: Machine{CPU: "a"}}},
		{Index: 1, Provenance: &Provenance{Shard: "1/2", Started: "2026-01-01T09:59:00Z", WallS: 60.5, Parallel: 4, Machine: Machine{CPU: "b"}}},
	}
	p := MergeProvenance("tracebed merge x", res, shards)
	if p.Started != "2026-01-01T09:59:00Z" || p.WallS != 90 || p.Runs != 5 || p.Parallel != 6 || len(p.Shards) != 2 || p.Machine.CPU != "a" || p.Commit != "c" {
		t.Errorf("%+v", p)
	}
}

// FuzzParseShard: any input is a shard file or an error, never a panic,
// and a shard file read back writes the same bytes again.
func FuzzParseShard(f *testing.F) {
	res, _ := os.ReadFile(filepath.Join("testdata", "incast.results.json"))
	r, err := Parse("incast.results.json", res)
	if err != nil {
		f.Fatal(err)
	}
	seed, err := (&ShardFile{Index: 1, Count: 3, Cost: 2.5, TotalCost: 9, Results: *r, Provenance: &Provenance{Shard: "1/3"}}).Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"schema": "tracebed.shard/v1"}`))
	f.Add(res)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseShard("fuzz.json", data)
		if err != nil {
			return
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatalf("a parsed shard does not marshal: %v", err)
		}
		s2, err := ParseShard("fuzz.json", out)
		if err != nil {
			t.Fatalf("a marshalled shard does not parse: %v", err)
		}
		out2, _ := s2.Marshal()
		if !bytes.Equal(out, out2) {
			t.Fatal("marshal, parse, marshal changed the file")
		}
	})
}
