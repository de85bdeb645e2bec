package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/tracebed/tracebed/experiments"
)

// bugReport is what tracebed prints after an internal error: a crash is a
// bug in tracebed, never the user's input (bad input is an error, exit 2).
const bugReport = `This is a bug in tracebed, not a problem with your input. Please report it at
https://github.com/tracebed/tracebed/issues with the command line, the output
of 'tracebed version' and the files the command read.`

// internalError prints an internal error (a panic, or a run that panicked)
// and the bug-report hint to w.
func internalError(w io.Writer, what any, stack []byte) {
	fmt.Fprintf(w, "tracebed: internal error: %v\n", what)
	if len(stack) > 0 {
		fmt.Fprintf(w, "%s\n", stack)
	}
	fmt.Fprintln(w, bugReport)
}

// panicked reports whether err is, or joins, a run's panic, and prints it
// as an internal error.
func (a *app) panicked(err error) bool {
	var pe *experiments.PanicError
	if !errors.As(err, &pe) {
		return false
	}
	var re *experiments.RunError
	what := any(pe.Value)
	if errors.As(err, &re) {
		what = fmt.Sprintf("run %s/%s/seed %d panicked: %v", re.Run.Scenario, re.Run.Policy, re.Run.Seed, pe.Value)
	}
	internalError(a.stderr, what, pe.Stack)
	return true
}

// Signals. The first SIGINT or SIGTERM cancels the command's context: runs
// stop within a moment (the simulation's event loop looks every few
// thousand events), results so far are written marked partial, and the
// command exits 1. A second signal, a second or more after the first,
// exits at once. Signals within a second of the first are the same
// interrupt (the terminal sends Ctrl-C to the crash monitor and to tracebed
// both, and the monitor forwards what it gets).
const sameInterrupt = time.Second

// signalContext returns a context cancelled, with a cause naming the
// signal, by the first SIGINT or SIGTERM, and a function that stops
// watching.
func signalContext(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		var first time.Time
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				switch {
				case first.IsZero():
					first = time.Now()
					cancel(fmt.Errorf("interrupted by %s", signalName(sig)))
					fmt.Fprintf(stderr, "\ntracebed: %s: stopping; partial results are written and marked as such (a second signal exits at once)\n", signalName(sig))
				case time.Since(first) >= sameInterrupt:
					fmt.Fprintf(stderr, "tracebed: %s again: exiting now; if a netns run was up, 'tracebed cleanup' removes what is left\n", signalName(sig))
					os.Exit(exitRunError)
				}
			}
		}
	}()
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(nil)
		})
	}
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// crashFDEnv names the file descriptor on which the crash monitor's child
// writes the runtime's crash report (debug.SetCrashOutput).
const crashFDEnv = "TRACEBED_CRASH_FD"

// crashOutput, in the crash monitor's child, sends the runtime's report of
// a fatal error (an unrecovered panic in any goroutine, out of memory, a
// concurrent map write) to the monitor too, which then exits 1 with the
// bug-report hint instead of the runtime's exit code 2, the code of bad
// input. Elsewhere it does nothing.
func crashOutput() {
	v := os.Getenv(crashFDEnv)
	if v == "" {
		return
	}
	os.Unsetenv(crashFDEnv) // not for the processes this one starts
	var fd uintptr
	if _, err := fmt.Sscan(v, &fd); err != nil || fd < 3 {
		return
	}
	f := os.NewFile(fd, "crash report")
	if f == nil {
		return
	}
	if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "tracebed: crash reports:", err)
	}
	f.Close() // SetCrashOutput keeps its own duplicate
}
