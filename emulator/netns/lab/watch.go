//go:build linux && !nonetns

package lab

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tracebed/tracebed/internal/logtail"
)

// ProcessStart returns when process pid started, in clock ticks since boot
// (field 22 of /proc/PID/stat): with the pid it identifies a process, so a
// later process that reuses the pid is not mistaken for it.
func ProcessStart(pid int) (uint64, error) {
	start, _, err := procStat(pid)
	return start, err
}

// procStat returns the start time and the state letter of process pid.
func procStat(pid int) (start uint64, state byte, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses: the fields after it start after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	start, err = strconv.ParseUint(fields[19], 10, 64) // field 22
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, fields[0][0], nil // field 3
}

// Alive reports whether process pid is running (not a zombie) and, when
// start is nonzero, is the process that started at start (ProcessStart).
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	s, state, err := procStat(pid)
	if err != nil || state == 'Z' || state == 'X' {
		return false
	}
	return start == 0 || s == start
}

// SwitchStatus is the state of one switch process of a run.
type SwitchStatus struct {
	Name  string
	PID   int
	Alive bool
	Log   string
	// LogTail is the end of the log of a process that is not alive.
	LogTail string
}

func (s SwitchStatus) String() string {
	if s.Alive {
		return fmt.Sprintf("switch %s (pid %d) is running", s.Name, s.PID)
	}
	return fmt.Sprintf("switch %s (pid %d) has died: the hosts behind it have lost connectivity (log: %s)", s.Name, s.PID, s.Log)
}

// Status returns the state of every switch process of the run, in the
// topology's switch order (those the run has; none under bridges).
func (r *Run) Status() []SwitchStatus {
	var names []string
	for name := range r.State.Switches {
		names = append(names, name)
	}
	slices.Sort(names)
	if r.Net != nil {
		names = names[:0]
		for _, sw := range r.Net.Topology.Switches() {
			if _, ok := r.State.Switches[sw.Name]; ok {
				names = append(names, sw.Name)
			}
		}
	}
	var out []SwitchStatus
	for _, name := range names {
		s := r.State.Switches[name]
		st := SwitchStatus{Name: name, PID: s.PID, Log: s.Log, Alive: Alive(s.PID, s.Start)}
		if !st.Alive {
			st.LogTail = logtail.File(s.Log, 10)
		}
		out = append(out, st)
	}
	return out
}

// Watch is the run's watchdog: it checks the switch processes every
// interval (default 200 ms) until ctx ends and calls died once for each
// that is no longer alive, with its status, after keeping its log
// (KeepLog; the kept path replaces Log when that worked).
func (r *Run) Watch(ctx context.Context, interval time.Duration, died func(SwitchStatus)) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	reported := map[string]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, s := range r.Status() {
			if s.Alive || reported[s.Name] {
				continue
			}
			if ctx.Err() != nil {
				return // stopping: the switches end on purpose
			}
			reported[s.Name] = true
			if p, err := r.KeepLog(s.Name); err == nil {
				s.Log = p
			}
			died(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
