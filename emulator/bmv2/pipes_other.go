//go:build !unix

package bmv2

import (
	"errors"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
)

// pipedInputs needs named pipes: bmv2 replays run on Unix systems only.
type pipedInputs struct{}

func newPipedInputs(string, int, []usefiles.Frame, time.Duration) (*pipedInputs, error) {
	return nil, errors.New("bmv2: replays need named pipes (a Unix system)")
}

func (*pipedInputs) Release() {}
func (*pipedInputs) Close()   {}
