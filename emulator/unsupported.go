package emulator

import (
	"errors"
	"fmt"
	"runtime"
)

// NeedsLinux returns the error of what (a substrate, a command) on a
// system other than Linux, where network namespaces, veth links and raw
// sockets do not exist: one sentence naming what, the system, and the
// simulation substrate, which runs everywhere. It matches
// errors.ErrUnsupported.
func NeedsLinux(what string) error { return linuxOnly(what) }

type linuxOnly string

func (e linuxOnly) Error() string {
	this := "this is " + runtime.GOOS
	if runtime.GOOS == "linux" {
		this = "this build has that code compiled out (-tags nonetns)"
	}
	return fmt.Sprintf("%s needs Linux (network namespaces, veth links and raw sockets), and %s: run on the sim substrate instead ('tracebed run'), which needs nothing but Go", string(e), this)
}

func (linuxOnly) Is(target error) bool { return target == errors.ErrUnsupported }
