// Package problems collects the input errors of one file — a spec, a
// topology, a trace — so that a reader can report every problem at once
// (each naming its file, line and field) instead of stopping at the first,
// up to a limit past which problems are only counted.
package problems

import (
	"errors"
	"fmt"
	"strings"
)

// Max is how many problems of a file tracebed reports before it only
// counts the rest.
const Max = 20

// List collects problems. The zero value keeps up to Max; a List with
// Limit set keeps up to Limit.
type List struct {
	Limit int
	errs  []error
	more  []string // the messages of the problems only counted
	seen  map[string]bool
}

// Add records err (nil is ignored); errors joined with errors.Join are
// recorded one by one, and a problem already recorded (the same message:
// a shared section checked for each of its users) only once. It reports
// true, so that a reader can write `if !p.Add(err) { return }` where going
// on is optional.
func (l *List) Add(err error) bool {
	if err == nil {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			l.Add(e)
		}
		return true
	}
	if m, ok := err.(moreProblems); ok {
		// Another list's problems beyond its limit, joined into its
		// error: counted here too (once each), not kept as a problem.
		for _, msg := range m {
			l.Add(countedError(msg))
		}
		return true
	}
	if l.seen[err.Error()] {
		return true
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[err.Error()] = true
	limit := l.Limit
	if limit <= 0 {
		limit = Max
	}
	if len(l.errs) < limit {
		l.errs = append(l.errs, err)
	} else {
		l.more = append(l.more, err.Error())
	}
	return true
}

// Len is the number of problems recorded, counted ones included.
func (l *List) Len() int { return len(l.errs) + len(l.more) }

// Err joins the problems kept, followed by how many more there were; it
// returns the problem itself when there was one, and nil when there were
// none.
func (l *List) Err() error {
	if l == nil || len(l.errs) == 0 {
		return nil
	}
	if len(l.errs) == 1 && len(l.more) == 0 {
		return l.errs[0]
	}
	errs := l.errs
	if len(l.more) > 0 {
		errs = append(errs[:len(errs):len(errs)], moreProblems(l.more))
	}
	return errors.Join(errs...)
}

// Split returns the problems of a report (an error Err returned, or any
// error joined with errors.Join): err itself when it joins nothing, and
// without the count of problems past the limit. Tests of readers use it to
// check each problem names its file and line.
func Split(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		if _, ok := e.(moreProblems); !ok {
			out = append(out, e)
		}
	}
	return out
}

// Match checks a reader's report against the problems it should hold, in
// order, each given by the start of its line ("file:line:col: field: …"):
// it returns nil, or an error saying which differ. Tests of readers use it.
func Match(err error, want []string) error {
	if err == nil {
		return fmt.Errorf("no problem reported; want %d", len(want))
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		return fmt.Errorf("%d problems reported, want %d:\n%v", len(lines), len(want), err)
	}
	var bad []error
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			bad = append(bad, fmt.Errorf("problem %d: %q, want it to start with %q", i, lines[i], w))
		}
	}
	return errors.Join(bad...)
}

// moreProblems are the problems a List only counted, the last of the
// problems its Err joins: their count, and their messages, so that a List
// they are added to counts each once.
type moreProblems []string

func (m moreProblems) Error() string { return fmt.Sprintf("… and %d more problems", len(m)) }

// countedError is a problem of another List's moreProblems.
type countedError string

func (e countedError) Error() string { return string(e) }
