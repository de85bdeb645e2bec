//go:build linux && !nonetns

package live

import (
	"container/heap"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The timers of a runtime. Go's own timers are as precise as the runtime's
// network poller, which waits in whole milliseconds (epoll_pwait): a process
// with sockets wakes a 100 µs timer about a millisecond late, which is far
// more than the time constants of the experiments (a fault's CPU time, a
// reclaim step). A runtime therefore keeps its timers itself, in a heap
// served by one goroutine locked to its own OS thread: it sleeps in ppoll
// with nanosecond timeouts and a timer slack of 1 µs, and posts each due
// timer's function to its loop. It wakes as late as the kernel wakes a
// sleeping thread (tens of µs on an idle machine, a few hundred µs on a
// loaded one); measure it with BenchmarkTimerLateness.

// timerSlack is the timer thread's timer slack (PR_SET_TIMERSLACK): how
// late the kernel may wake it to coalesce wake-ups (50 µs by default).
const timerSlack = time.Microsecond

// timerQueue is a runtime's timer heap and its thread.
type timerQueue struct {
	mu      sync.Mutex
	h       timerHeap
	seq     uint64
	wake    int // eventfd that interrupts the thread's sleep
	started bool
	closed  bool
	done    chan struct{}
}

// pending is a timer in the heap.
type pending struct {
	at    time.Time
	seq   uint64 // ties fire in the order they were set
	index int    // in the heap, -1 once removed
	fire  func() // posts the timer's function to its loop
}

type timerHeap []*pending

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	p := x.(*pending)
	p.index = len(*h)
	*h = append(*h, p)
}
func (h *timerHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	p.index = -1
	return p
}

// add schedules fire after d. It reports false once the queue is closed.
func (q *timerQueue) add(d time.Duration, fire func()) (*pending, bool) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, false
	}
	if !q.started {
		if err := q.start(); err != nil {
			q.mu.Unlock()
			return nil, false
		}
	}
	q.seq++
	p := &pending{at: time.Now().Add(d), seq: q.seq, fire: fire}
	heap.Push(&q.h, p)
	first := q.h[0] == p
	q.mu.Unlock()
	if first {
		q.interrupt()
	}
	return p, true
}

// remove takes p out of the heap if it is still there. A timer stopped
// after close (a loop's last callback, while the runtime shuts down) is in
// no heap.
func (q *timerQueue) remove(p *pending) {
	q.mu.Lock()
	if i := p.index; i >= 0 && i < len(q.h) && q.h[i] == p {
		heap.Remove(&q.h, i)
	}
	q.mu.Unlock()
}

// start starts the timer thread; q.mu is held.
func (q *timerQueue) start() error {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	q.wake, q.started, q.done = fd, true, make(chan struct{})
	go q.run()
	return nil
}

func (q *timerQueue) interrupt() {
	one := [8]byte{1}
	unix.Write(q.wake, one[:]) // EAGAIN: a wake-up is already pending
}

// run is the timer thread.
func (q *timerQueue) run() {
	runtime.LockOSThread() // the thread exits with the goroutine: its slack goes with it
	defer close(q.done)
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(timerSlack), 0, 0, 0)
	fds := []unix.PollFd{{Fd: int32(q.wake), Events: unix.POLLIN}}
	var buf [8]byte
	var due []func()
	for {
		now := time.Now()
		wait := time.Duration(-1)
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return
		}
		for len(q.h) > 0 && !q.h[0].at.After(now) {
			due = append(due, heap.Pop(&q.h).(*pending).fire)
		}
		if len(q.h) > 0 {
			wait = q.h[0].at.Sub(now)
		}
		q.mu.Unlock()
		if len(due) > 0 {
			for i, f := range due {
				f()
				due[i] = nil
			}
			due = due[:0]
			continue // time has passed: look again before sleeping
		}
		var ts *unix.Timespec
		if wait >= 0 {
			t := unix.NsecToTimespec(int64(wait))
			ts = &t
		}
		if _, err := unix.Ppoll(fds, ts, nil); err == nil && fds[0].Revents != 0 {
			unix.Read(q.wake, buf[:])
		}
	}
}

// close stops the thread and drops every pending timer.
func (q *timerQueue) close() {
	q.mu.Lock()
	q.closed = true
	for _, p := range q.h {
		p.index = -1
	}
	q.h = nil
	started := q.started
	q.mu.Unlock()
	if started {
		q.interrupt()
		<-q.done
		unix.Close(q.wake)
	}
}
