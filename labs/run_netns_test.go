//go:build linux && !nonetns

package labs

import "github.com/tracebed/tracebed/emulator/netns/lab"

// removeRun removes what is left of run id.
func removeRun(id string) { lab.Remove(id) }
