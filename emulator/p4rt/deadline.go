package p4rt

import (
	"context"
	"time"
)

// CallTimeout bounds one control-plane call that a controller or an agent
// makes from inside an event callback (a job's binding written as its
// all-reduce begins, a register read): on the netns substrate each is a
// gRPC round trip to a switch process, and a switch that stopped answering
// must fail the run with an error, not stall the agent's event loop. On
// sim the calls return at once and never meet it.
const CallTimeout = 10 * time.Second

// CallContext returns the context of one such call: it ends after
// CallTimeout. The caller calls cancel when the call returns.
func CallContext() (ctx context.Context, cancel context.CancelFunc) {
	return context.WithTimeout(context.Background(), CallTimeout)
}
