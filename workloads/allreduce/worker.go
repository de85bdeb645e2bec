package allreduce

import (
	"fmt"
	"time"

	"github.com/tracebed/tracebed/emulator"
)

// Worker is a data-parallel training worker: Iterations times it computes
// for Compute, fills its gradient and all-reduces it with its Reducer. It is
// an emulator.Agent.
type Worker struct {
	Reducer    Reducer
	Tensor     []int32
	Iterations int
	// Compute is the computation time of one iteration.
	Compute time.Duration
	// ComputeTime, if set, gives the computation time of iteration it
	// instead of Compute (workers whose compute time varies).
	ComputeTime func(it int) time.Duration
	// Delay postpones the first iteration (a job's arrival).
	Delay time.Duration
	// FirstRound is the all-reduce round of the first iteration.
	FirstRound uint32
	// Fill, if set, writes the gradient of iteration it into the tensor once
	// the computation is over.
	Fill func(it int, tensor []int32)
	// Check, if set, sees the sum of each iteration; an error stops the worker.
	Check func(it int, tensor []int32) error
	// Done, if set, is called once, when the last iteration ends or at the
	// first error.
	Done func(at time.Duration, err error)

	env emulator.Env
	it  int
	// IterationEnd holds the time each iteration's all-reduce finished.
	IterationEnd []time.Duration
	// CommTime is the total time spent in all-reduce.
	CommTime time.Duration
	Finished bool
	// FinishedAt is when the worker finished (its last all-reduce, or its
	// first error).
	FinishedAt time.Duration
	Err        error
	commFrom   time.Duration
}

// Start implements emulator.Agent.
func (w *Worker) Start(env emulator.Env) {
	w.env = env
	w.Reducer.Start(env)
	if w.Iterations <= 0 {
		w.finish(nil)
		return
	}
	env.After(w.Delay+w.compute(0), w.communicate)
}

func (w *Worker) compute(it int) time.Duration {
	if w.ComputeTime != nil {
		return w.ComputeTime(it)
	}
	return w.Compute
}

// Recv implements emulator.Agent.
func (w *Worker) Recv(from emulator.Addr, payload []byte) { w.Reducer.Recv(from, payload) }

func (w *Worker) communicate() {
	if w.Fill != nil {
		w.Fill(w.it, w.Tensor)
	}
	w.commFrom = w.env.Now()
	w.Reducer.AllReduce(w.Tensor, w.FirstRound+uint32(w.it), w.reduced)
}

func (w *Worker) reduced(err error) {
	now := w.env.Now()
	w.CommTime += now - w.commFrom
	if err == nil && w.Check != nil {
		err = w.Check(w.it, w.Tensor)
	}
	if err != nil {
		w.finish(fmt.Errorf("iteration %d: %w", w.it, err))
		return
	}
	w.IterationEnd = append(w.IterationEnd, now)
	w.it++
	if w.it == w.Iterations {
		w.finish(nil)
		return
	}
	w.env.After(w.compute(w.it), w.communicate)
}

func (w *Worker) finish(err error) {
	w.Finished, w.Err, w.FinishedAt = true, err, w.env.Now()
	if w.Done != nil {
		w.Done(w.env.Now(), err)
	}
}
