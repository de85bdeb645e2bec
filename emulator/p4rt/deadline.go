package p4rt

import (
	"context"

	"github.com/tracebed/tracebed/emulator"
)

// CallTimeout bounds one control-plane call: on the netns substrate each
// is a gRPC round trip to a switch process, and a switch that stopped
// answering must fail the run with an error, not stall it. Agents never
// wait for a call (their Port's calls run outside their callbacks, within
// the same bound, emulator.CallTimeout); a driver that programs switches
// on its own goroutine before a run — allreduce's job setup — waits at
// most this long.
const CallTimeout = emulator.CallTimeout

// CallContext returns the context of one such call made by a driver: it
// ends after CallTimeout. The caller calls cancel when the call returns.
func CallContext() (ctx context.Context, cancel context.CancelFunc) {
	return context.WithTimeout(context.Background(), CallTimeout)
}
