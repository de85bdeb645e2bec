package topologies

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/tracebed/tracebed/internal/yamlx"
)

// ready holds the topology files shipped with tracebed.
//
//go:embed *.yaml
var ready embed.FS

// ReadyFiles lists the embedded topology files (star.yaml, leafspine.yaml, …).
func ReadyFiles() []string {
	entries, _ := fs.ReadDir(ready, ".")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// ReadyFile returns the content of an embedded topology file.
func ReadyFile(name string) ([]byte, error) {
	if !strings.HasSuffix(name, ".yaml") {
		name += ".yaml"
	}
	return ready.ReadFile(name)
}

// Open loads a topology from a path on disk or, when no such file exists,
// from the embedded ready files by name ("star", "leafspine.yaml",
// "topologies/fattree-k4.yaml").
func Open(path string) (*Topology, error) {
	data, err := yamlx.ReadFile(path)
	if err == nil {
		return Parse(path, data)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("topology: %w", err)
	}
	name := strings.TrimPrefix(path, "topologies/")
	if data, rerr := ReadyFile(name); rerr == nil {
		return Parse("topologies/"+strings.TrimSuffix(name, ".yaml")+".yaml", data)
	}
	return nil, fmt.Errorf("topology %s: no such file, and not one of the ready topologies (%s)", path, strings.Join(ReadyFiles(), ", "))
}
