package switchcmd

import (
	"github.com/tracebed/tracebed/emulator/dataplane"
)

// Registry returns the programs a switch can run. The command calls it
// when it starts a switch; the tracebed binary assembles its registry in
// cmd/tracebed, from p4/programs.
type Registry func() (*dataplane.Registry, error)
