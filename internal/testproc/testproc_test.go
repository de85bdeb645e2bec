package testproc

import (
	"testing"
	"time"
)

func TestCommandIsKilledWhenTheTestEnds(t *testing.T) {
	var cmd interface{ Wait() error }
	t.Run("sleeper", func(t *testing.T) {
		c := Command(t, "sleep", "600")
		if err := c.Start(); err != nil {
			t.Skip("skipping: no sleep command:", err)
		}
		cmd = c
	})
	if cmd == nil {
		return
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("sleep 600 exited cleanly")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process of a finished test is still running")
	}
}
