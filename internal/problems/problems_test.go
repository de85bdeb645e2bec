package problems

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	tests := []struct {
		name  string
		limit int
		add   []error
		want  []string // lines of Err
		n     int
	}{
		{name: "none", add: []error{nil, nil}, n: 0},
		{name: "one", add: []error{errors.New("a")}, want: []string{"a"}, n: 1},
		{name: "the same twice", add: []error{errors.New("a"), errors.New("b"), errors.New("a")}, want: []string{"a", "b"}, n: 2},
		{name: "joined are counted one by one", limit: 3, add: []error{errors.Join(errors.New("a"), errors.New("b")), errors.New("c"), errors.New("d")},
			want: []string{"a", "b", "c", "… and 1 more problems"}, n: 4},
		{name: "another list's count is carried over", limit: 2, add: []error{func() error {
			inner := List{Limit: 2}
			for _, e := range []string{"a", "b", "c", "d", "e"} {
				inner.Add(errors.New(e))
			}
			return inner.Err()
		}(), errors.New("f")}, want: []string{"a", "b", "… and 4 more problems"}, n: 6},
		{name: "another list's problems are counted once", limit: 2, add: func() []error {
			var es []error
			for range 3 { // three users of one section report its five problems
				inner := List{Limit: 2}
				for _, e := range []string{"a", "b", "c", "d", "e"} {
					inner.Add(errors.New(e))
				}
				es = append(es, inner.Err())
			}
			return es
		}(), want: []string{"a", "b", "… and 3 more problems"}, n: 5},
		{name: "default limit", add: func() []error {
			var es []error
			for i := range Max + 5 {
				es = append(es, fmt.Errorf("e%d", i))
			}
			return es
		}(), n: Max + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := List{Limit: tt.limit}
			for _, e := range tt.add {
				l.Add(e)
			}
			if l.Len() != tt.n {
				t.Errorf("Len %d, want %d", l.Len(), tt.n)
			}
			err := l.Err()
			if tt.n == 0 {
				if err != nil {
					t.Errorf("Err %v, want nil", err)
				}
				return
			}
			lines := strings.Split(err.Error(), "\n")
			if tt.want != nil && strings.Join(lines, "|") != strings.Join(tt.want, "|") {
				t.Errorf("Err %q, want %q", lines, tt.want)
			}
			if tt.limit == 0 && len(lines) != min(tt.n, Max)+min(1, max(0, tt.n-Max)) {
				t.Errorf("%d lines for %d problems", len(lines), tt.n)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	err := errors.Join(errors.New("f:1:2: a: bad"), errors.New("f:3:4: b: worse"))
	if e := Match(err, []string{"f:1:2: a:", "f:3:4: b: worse"}); e != nil {
		t.Errorf("Match: %v", e)
	}
	for _, want := range [][]string{{"f:1:2: a:"}, {"f:1:2: a:", "f:3:5"}, nil} {
		if Match(err, want) == nil {
			t.Errorf("Match(%q) accepted", want)
		}
	}
	if Match(nil, []string{"x"}) == nil {
		t.Error("Match(nil) accepted")
	}
}

// TestSplit: a report splits into the problems it kept, without the count
// of those past the limit; a lone error is its own problem.
func TestSplit(t *testing.T) {
	l := List{Limit: 2}
	for _, s := range []string{"a", "b", "c"} {
		l.Add(errors.New(s))
	}
	var got []string
	for _, e := range Split(l.Err()) {
		got = append(got, e.Error())
	}
	if strings.Join(got, "|") != "a|b" {
		t.Errorf("Split = %q, want a and b", got)
	}
	if one := errors.New("x"); len(Split(one)) != 1 || Split(one)[0] != one {
		t.Errorf("Split of one error: %v", Split(one))
	}
	if Split(nil) != nil {
		t.Error("Split(nil) is not empty")
	}
}
