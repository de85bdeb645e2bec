package switchml

import (
	"testing"

	"github.com/tracebed/tracebed/systems/inasched"
)

func job(id, workers int) inasched.Job {
	return inasched.Job{ID: id, Workers: workers, Switch: "tor", Demand: 100, Useful: 60}
}

func TestPartitions(t *testing.T) {
	for _, tt := range []struct {
		mem, part, n, size int
	}{{1000, 100, 10, 100}, {1000, 300, 3, 333}, {50, 100, 1, 50}, {0, 100, 0, 0}, {4096, 466, 8, 512}} {
		s, err := New(Params{Partition: tt.part}, inasched.Memory{"tor": tt.mem}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if n, size := s.Partitions("tor"); n != tt.n || size != tt.size {
			t.Errorf("memory %d, partition %d: %d × %d; want %d × %d", tt.mem, tt.part, n, size, tt.n, tt.size)
		}
	}
	if _, err := New(Params{}, inasched.Memory{"tor": 10}, 1); err == nil {
		t.Error("partition 0 accepted")
	}
}

// TestIsolation: partitions go to jobs in start order, are held until the
// job finishes, never overlap, and pass to the longest-waiting job.
func TestIsolation(t *testing.T) {
	s, _ := New(Params{Partition: 100}, inasched.Memory{"tor": 200}, 1)
	for id := range 4 {
		s.Admit(0, job(id, 4))
	}
	s.Admit(0, job(9, 1)) // a single worker never takes memory
	b := func(id int) inasched.Binding { return s.Binding(0, id) }
	if b(0) != (inasched.Binding{Mode: inasched.Pool, Pool: 0, Base: 0, Size: 100}) || b(1) != (inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 100, Size: 100}) {
		t.Fatalf("first jobs bound to %v and %v", b(0), b(1))
	}
	if b(2).INA() || b(3).INA() || b(9).INA() {
		t.Fatalf("jobs without a free partition bound to %v, %v, %v", b(2), b(3), b(9))
	}
	s.Depart(1, 1)
	if b(2) != (inasched.Binding{Mode: inasched.Pool, Pool: 1, Base: 100, Size: 100}) || b(3).INA() {
		t.Fatalf("after job 1 left: job 2 %v, job 3 %v", b(2), b(3))
	}
	s.Depart(2, 3) // a waiting job leaves the queue
	s.Depart(3, 0)
	if b(0).INA() {
		t.Error("departed job keeps memory")
	}
	if got := b(2); got.Base != 100 {
		t.Errorf("job 2 moved to %v; partitions are static", got)
	}
	s.Admit(4, job(5, 2))
	if got := b(5); got.Base != 0 || got.Size != 100 {
		t.Errorf("new job got %v, want the free partition 0", got)
	}
}
