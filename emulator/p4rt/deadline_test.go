package p4rt

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCallContext: a control-plane call's context has a deadline no later
// than CallTimeout from now, and a Local call made after it ended fails.
func TestCallContext(t *testing.T) {
	before := time.Now()
	ctx, cancel := CallContext()
	d, ok := ctx.Deadline()
	if !ok || d.Before(before) || d.After(time.Now().Add(CallTimeout)) {
		t.Errorf("deadline %v (set %v), want within %v of now", d, ok, CallTimeout)
	}
	cancel()
	if err := Local(nil).Write(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("write on an ended call: %v, want context.Canceled", err)
	}
}
