package allreduce

import (
	"testing"
	"time"

	"github.com/tracebed/tracebed/emulator/sim"
)

func TestSmoke(t *testing.T) {
	for _, mode := range []struct {
		name   string
		mode   Mode
		shared bool
	}{{"pool", ModeINA, false}, {"shared", ModeINA, true}, {"ps", ModePS, false}, {"ring", ModeRing, false}} {
		t.Run(mode.name, func(t *testing.T) {
			top := starTopo(t, netParams{hosts: 5, delay: time.Microsecond, aggregators: 64, loss: 0.05, dup: 0.05, reorder: 0.05})
			s, n := newNet(t, top, 8, 1)
			g := gradients{seed: 7, limit: 1000}
			spec := JobSpec{ID: 3, Mode: mode.mode, Shared: mode.shared, Hosts: hostNames(1, 4), PSHost: "h5", Switch: "tor",
				Base: 8, Size: 16, Window: 16, K: 8, Elements: 1000, Iterations: 3, Compute: 10 * time.Microsecond,
				Timeout: 50 * time.Microsecond, Fill: g.fill(3), Check: g.check(3, 4, 1000)}
			j, err := Setup(n, spec)
			if err != nil {
				t.Fatal(err)
			}
			runJobs(t, s, []*Job{j}, sim.Second)
			t.Logf("finish %v events %d", j.Finish, s.Fired())
			if j.PS != nil {
				t.Logf("ps %+v", j.PS.Stats)
			}
			for _, st := range j.Streams {
				t.Logf("stream %+v", st.Stats)
			}
		})
	}
}
