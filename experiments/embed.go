package experiments

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/tracebed/tracebed/internal/yamlx"
)

// ready holds the experiment specs shipped with tracebed.
//
//go:embed *.yaml
var ready embed.FS

// ReadyFiles lists the embedded specs.
func ReadyFiles() []string {
	entries, _ := fs.ReadDir(ready, ".")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// ReadyFile returns the content of an embedded spec ("incast.yaml").
func ReadyFile(name string) ([]byte, error) {
	return ready.ReadFile(name)
}

// Open loads a spec from a path on disk or, when no such file exists, from
// the embedded specs by name ("incast", "experiments/incast.yaml").
// readFile serves other files built into the binary (traces).
func Open(path string, readFile func(string) ([]byte, error)) (*Spec, error) {
	data, err := yamlx.ReadFile(path)
	if err == nil {
		return ParseSpec(path, data, readFile)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spec: %w", err)
	}
	name := strings.TrimSuffix(strings.TrimPrefix(filepath.ToSlash(path), "experiments/"), ".yaml") + ".yaml"
	if data, rerr := ready.ReadFile(name); rerr == nil {
		return ParseSpec("experiments/"+name, data, readFile)
	}
	return nil, fmt.Errorf("spec %s: no such file, and not one of the ready experiments (%s)", path, strings.Join(ReadyFiles(), ", "))
}

// Suite returns the ready specs written for a substrate: for "netns", those
// whose own substrate is netns (the scenarios small enough for real time);
// for "sim", the default suite.
func Suite(substrate string, readFile func(string) ([]byte, error)) ([]*Spec, error) {
	if substrate != "netns" {
		return DefaultSuite(readFile)
	}
	var out []*Spec
	for _, name := range ReadyFiles() {
		s, err := Open("experiments/"+name, readFile)
		if err != nil {
			return nil, err
		}
		if s.Substrate == "netns" {
			out = append(out, s)
		}
	}
	return out, nil
}

// DefaultSuite returns the embedded specs marked default: true, which
// `tracebed run` runs when given no spec.
func DefaultSuite(readFile func(string) ([]byte, error)) ([]*Spec, error) {
	var out []*Spec
	for _, name := range ReadyFiles() {
		s, err := Open("experiments/"+name, readFile)
		if err != nil {
			return nil, err
		}
		if s.Default {
			out = append(out, s)
		}
	}
	return out, nil
}
