//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// monitorEnv is set in the crash monitor's child.
const monitorEnv = "TRACEBED_MONITORED"

// superviseCrashes runs tracebed in a child process and waits for it, when
// the command is one that reads the user's files or runs experiments (not
// the switch process, nor topo, whose processes other commands track). It
// returns the exit code for this process, and false when it did not
// supervise (this is the child, or the command is not supervised).
//
// The Go runtime exits with code 2 on a fatal error (an unrecovered panic
// in any goroutine, running out of memory, …) — the code tracebed keeps for
// bad input — and no code in the process can intercept it. So the child
// sends its crash report to a pipe (debug.SetCrashOutput), and the monitor,
// which forwards signals to it, turns a crash into exit 1 with the
// bug-report hint (docs/reliability.md). The child dies with the monitor
// (Pdeathsig).
func superviseCrashes(args []string) (int, bool) {
	if os.Getenv(monitorEnv) != "" || !supervised(args) {
		return 0, false
	}
	self, err := os.Executable()
	if err != nil {
		return 0, false
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, false
	}
	cmd := exec.Command(self, args...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{w} // fd 3
	cmd.Env = append(os.Environ(), monitorEnv+"=1", crashFDEnv+"=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Signals for tracebed go to the child; it tells the first from a
	// second (signalContext).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		w.Close()
		r.Close()
		return 0, false
	}
	w.Close()
	report := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		report <- b
	}()
	go func() {
		for sig := range sigs {
			cmd.Process.Signal(sig)
		}
	}()
	err = cmd.Wait()
	crash := <-report
	r.Close()
	var ee *exec.ExitError
	switch {
	case len(crash) > 0:
		// The runtime printed the report on stderr already.
		fmt.Fprintln(os.Stderr, "tracebed: internal error: the process crashed (report above)")
		fmt.Fprintln(os.Stderr, bugReport)
		return exitRunError, true
	case err == nil:
		return exitOK, true
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal()
			hint := ""
			if sig == syscall.SIGKILL {
				hint = " (by the kernel's out-of-memory killer, if nobody sent it: see --max-memory in 'tracebed run --help')"
			}
			fmt.Fprintf(os.Stderr, "tracebed: killed by signal %s%s\n", sig, hint)
			return exitRunError, true
		}
		return ee.ExitCode(), true
	}
	fmt.Fprintln(os.Stderr, "tracebed:", err)
	return exitRunError, true
}

// supervised reports whether the command of args runs under the crash
// monitor: every command but the switch process, topo (its processes are
// tracked by pid) and the quick ones that read no input.
func supervised(args []string) bool {
	for _, a := range args {
		if len(a) > 0 && a[0] == '-' {
			continue
		}
		switch a {
		case "switch", "topo", "version", "help", "completion", "cleanup":
			return false
		}
		return true
	}
	return false
}
