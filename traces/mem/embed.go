package memtrace

import "embed"

// Files holds the sample traces shipped in the tracebed binary, under
// samples/. The command serves them by their repository path, so a spec may
// say trace: traces/mem/samples/two-pass.memtxt on any machine.
//
//go:embed samples
var Files embed.FS
