package mine

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tracebed/tracebed/systems/inasched"
)

func newJob(id, demand, useful int) inasched.Job {
	return inasched.Job{ID: id, Workers: 4, Switch: "tor", Demand: demand, Useful: useful,
		Compute: time.Second, CommINA: 100 * time.Millisecond, CommRing: 300 * time.Millisecond}
}

func TestFirstComeFirstServed(t *testing.T) {
	s, err := New(inasched.Memory{"tor": 1000}, 4)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Duration(0)
	s.Admit(at, newJob(1, 400, 40))
	s.Admit(at, newJob(2, 400, 40))
	s.Admit(at, newJob(3, 400, 300)) // 200 left: too few to beat the ring
	s.Admit(at, newJob(4, 400, 40))  // 200 left: takes them
	s.Admit(at, newJob(5, 100, 10))  // nothing left: waits
	for _, tc := range []struct {
		id   int
		want inasched.Binding
	}{
		{1, inasched.Binding{Mode: inasched.Pool, Pool: 0, Base: 0, Size: 400}},
		{2, inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 400, Size: 400}},
		{3, inasched.RingBinding},
		{4, inasched.Binding{Mode: inasched.Pool, Pool: 2, Base: 800, Size: 200}},
		{5, inasched.RingBinding},
	} {
		if got := s.Binding(at, tc.id); got != tc.want {
			t.Errorf("job %d: %v, want %v", tc.id, got, tc.want)
		}
	}
	// Job 1 leaves: job 3 (first waiting) gets its 400, job 5 nothing.
	s.Depart(at, 1)
	if got := s.Binding(at, 3); got.Base != 0 || got.Size != 400 {
		t.Errorf("job 3 after job 1 left: %v", got)
	}
	if got := s.Binding(at, 5); got.INA() {
		t.Errorf("job 5 after job 1 left: %v", got)
	}
	s.Depart(at, 4)
	if got := s.Binding(at, 5); got.Base != 800 || got.Size != 100 {
		t.Errorf("job 5 after job 4 left: %v", got)
	}
}

func TestNeverUseless(t *testing.T) {
	s, _ := New(inasched.Memory{"tor": 64}, 1)
	s.Admit(0, newJob(1, 400, 100)) // the whole switch could not beat the ring
	if b := s.Binding(0, 1); b.INA() {
		t.Errorf("binding %v, want the ring", b)
	}
	s.Depart(0, 1)
	s.Admit(0, inasched.Job{ID: 2, Workers: 1, Switch: "tor", Demand: 8, Useful: 1}) // one worker: nothing to aggregate
	if b := s.Binding(0, 2); b.INA() {
		t.Errorf("single worker: %v, want the ring", b)
	}
}

// TestRandomJobs admits and retires random jobs: bindings never overlap,
// stay inside the switch, hold whole slots, and every one beats the ring.
func TestRandomJobs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const memory, slot = 2048, 8
	s, _ := New(inasched.Memory{"tor": memory}, slot)
	live := map[int]inasched.Job{}
	for step := range 2000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			for id := range live {
				s.Depart(0, id)
				delete(live, id)
				break
			}
		} else {
			j := newJob(step, 8+r.IntN(900), 8+r.IntN(300))
			s.Admit(0, j)
			live[j.ID] = j
		}
		var bs []inasched.Binding
		for id, j := range live {
			b := s.Binding(0, id)
			if !b.INA() {
				continue
			}
			if b.Base < 0 || b.Base+b.Size > memory || b.Size%slot != 0 || !j.PoolUseful(b.Size) || b.Size > j.Demand+slot {
				t.Fatalf("step %d: job %d (demand %d, useful %d) has %v", step, id, j.Demand, j.Useful, b)
			}
			for _, o := range bs {
				if b.Overlaps(o) {
					t.Fatalf("step %d: %v overlaps %v", step, b, o)
				}
			}
			bs = append(bs, b)
		}
	}
}
