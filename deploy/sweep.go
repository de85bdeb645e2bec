// Package deploy turns a sharded sweep into what cluster engines run: a
// Kubernetes Indexed Job and its merge Job (built from k8s.io/api types), a
// Slurm array script with a dependent merge job, and an OCI image of
// tracebed built without Docker (go-containerregistry). docs/scale-out.md
// describes how to use them.
package deploy

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Sweep is what every cluster engine runs: N shards of tracebed run over
// the same specs, then one tracebed merge.
type Sweep struct {
	// Name names the jobs (a DNS-1123 label of at most MaxNameLen
	// characters; Name makes one from an experiment's name).
	Name string
	// Specs are the spec arguments of tracebed run, as given on the
	// command line: ready names ("dynaina-sweep") or paths relative to
	// the working directory; none means the default suite.
	Specs []string
	// Experiments are the specs' experiment names, which the merge waits
	// for.
	Experiments []string
	// Shards is the number of shards, N.
	Shards int
	// Parallel is the runs each shard executes at once (run --parallel);
	// 0 means 1.
	Parallel int
}

// MaxNameLen bounds a sweep's name so that its objects' names ("-shards",
// "-results") and the Indexed Job's pod host names (name-shards-INDEX) stay
// DNS-1123 labels.
const MaxNameLen = 40

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// Name makes a sweep name from an experiment name: "tracebed-" and the
// name in lower case, other characters than letters, digits and '-' as '-'.
func Name(experiment string) string {
	n := "tracebed-" + notDNS.ReplaceAllString(strings.ToLower(experiment), "-")
	n = strings.Trim(n[:min(len(n), MaxNameLen)], "-")
	return n
}

func (s *Sweep) check() error {
	if errs := validation.IsDNS1123Label(s.Name); len(errs) > 0 {
		return fmt.Errorf("name %q: %s", s.Name, strings.Join(errs, "; "))
	}
	if len(s.Name) > MaxNameLen {
		return fmt.Errorf("name %q: %d characters; want at most %d", s.Name, len(s.Name), MaxNameLen)
	}
	if s.Shards < 1 {
		return fmt.Errorf("%d shards; want 1 or more", s.Shards)
	}
	return nil
}

func (s *Sweep) parallel() int { return max(s.Parallel, 1) }

// File is a file shipped with a sweep (a spec, or a topology or trace it
// names) at the path, relative to the working directory, where tracebed
// looks for it.
type File struct {
	Path string
	Data []byte
}

// relPath checks that p is a relative path that stays where it is put and
// returns it cleaned.
func relPath(p string) (string, error) {
	c := path.Clean(p)
	if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%s: only files under the working directory can be shipped (give the spec by a relative path, with the files it names beside it or below)", p)
	}
	return c, nil
}
