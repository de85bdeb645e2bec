//go:build unix

package bmv2

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2/usefiles"
)

// pipedInputs feeds simple_switch's --use-files inputs through named
// pipes, so that no frame reaches the switch before its program and
// entries are in place, however long that takes: the switch opens every
// pN_in.pcap when it starts and reads its pcap header, which each pipe's
// writer sends at once; the records follow when Release is called. (With
// regular files the switch reads the frames after a fixed wait, and on a
// loaded machine programming it took longer than the wait.)
type pipedInputs struct {
	release chan struct{}
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// newPipedInputs makes dir's input pipes for ports 1..ports and starts
// their writers.
func newPipedInputs(dir string, ports int, frames []usefiles.Frame, gap time.Duration) (*pipedInputs, error) {
	headers, records, err := usefiles.Encode(ports, frames, gap)
	if err != nil {
		return nil, err
	}
	in := &pipedInputs{release: make(chan struct{}), stop: make(chan struct{})}
	for p := 1; p <= ports; p++ {
		path := usefiles.InputPath(dir, p)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			in.Close()
			return nil, fmt.Errorf("named pipe %s: %w", path, err)
		}
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			in.feed(path, headers[p], records[p])
		}()
	}
	return in, nil
}

// feed waits for the switch to open path, writes the header, and the
// records once released. A write fails only when the switch has closed
// its end, which is to say exited: Replay sees that itself.
func (in *pipedInputs) feed(path string, header, records []byte) {
	var f *os.File
	for {
		// Non-blocking: ENXIO until the switch opens its end, so that
		// Close can stop a writer whose switch never came.
		var err error
		f, err = os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			return // no such pipe any more: the run is over
		}
		select {
		case <-in.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	defer f.Close()
	if _, err := f.Write(header); err != nil {
		return
	}
	select {
	case <-in.release:
		f.Write(records)
	case <-in.stop:
	}
}

// Release lets the frames go.
func (in *pipedInputs) Release() {
	select {
	case <-in.release:
	default:
		close(in.release)
	}
}

// Close stops the writers that still wait (the switch is gone or the run
// failed) and waits for them.
func (in *pipedInputs) Close() {
	in.once.Do(func() { close(in.stop) })
	in.wg.Wait()
}
