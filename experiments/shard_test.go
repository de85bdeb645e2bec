package experiments

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseShard(t *testing.T) {
	tests := []struct {
		in   string
		want Shard
		err  string
	}{
		{"0/1", Shard{0, 1}, ""},
		{"6/7", Shard{6, 7}, ""},
		{" 2 / 3 ", Shard{2, 3}, ""},
		{"3/3", Shard{}, "index 3; want 0 to 2"},
		{"-1/3", Shard{}, "index -1"},
		{"0/0", Shard{}, "0 shards"},
		{"1", Shard{}, "want I/N"},
		{"a/b", Shard{}, "two whole numbers"},
		{"0/100001", Shard{}, "want 1 to 100000"},
	}
	for _, tt := range tests {
		got, err := ParseShard(tt.in)
		if tt.err == "" && (err != nil || got != tt.want) {
			t.Errorf("ParseShard(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("ParseShard(%q): error %v, want %q", tt.in, err, tt.err)
		}
	}
	if s := (Shard{2, 5}).String(); s != "2/5" {
		t.Errorf("String() = %s", s)
	}
}

// costExp is an experiment whose runs cost what its table says.
type costExp struct {
	*fakeExp
	cost map[string]float64 // by scenario
}

func (c costExp) Cost(r Run) float64 { return c.cost[r.Scenario] * float64(r.Seed) }

func parse(t *testing.T, yaml string) *Spec {
	t.Helper()
	s, err := ParseSpec("demo.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const sweepSpec = `
kind: fake
seeds: [1, 2, 3]
policies: [a, b]
scenarios: [{name: big}, {name: mid}, {name: small}, {name: tiny}]
`

// TestPlanSplitsEveryRunOnce: for any number of shards every run is in
// exactly one shard, the plan is the same however often it is made, and
// the shards' costs sum to the total.
func TestPlanSplitsEveryRunOnce(t *testing.T) {
	s := parse(t, sweepSpec)
	exp := costExp{cost: map[string]float64{"big": 100, "mid": 10, "small": 1, "tiny": 0.1}}
	for n := 1; n <= 30; n++ {
		p := NewPlan(s, exp, n)
		if again := NewPlan(s, exp, n); !slices.Equal(p.Shard, again.Shard) {
			t.Fatalf("n=%d: two plans differ", n)
		}
		seen := map[string]int{}
		var sum float64
		for i := range n {
			for _, r := range p.Of(i) {
				seen[fmt.Sprint(r.Scenario, r.Policy, r.Seed)]++
			}
			sum += p.Load[i]
		}
		if len(seen) != 24 {
			t.Errorf("n=%d: %d distinct runs in the shards, want 24", n, len(seen))
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("n=%d: run %s in %d shards", n, k, c)
			}
		}
		if math.Abs(sum-p.Total()) > 1e-9*p.Total() {
			t.Errorf("n=%d: shard costs sum to %g, total %g", n, sum, p.Total())
		}
	}
}

// TestPlanBalancesCost: with costs that differ by orders of magnitude the
// expensive runs are spread over the shards (the longest-processing-time
// rule is within 4/3 of the best split), where splitting by count is not.
func TestPlanBalancesCost(t *testing.T) {
	s := parse(t, sweepSpec)
	exp := costExp{cost: map[string]float64{"big": 100, "mid": 10, "small": 1, "tiny": 0.1}}
	for _, n := range []int{2, 3, 4, 6} {
		p := NewPlan(s, exp, n)
		// A lower bound on the best split's largest shard.
		bound := max(p.Total()/float64(n), slices.Max(p.Cost))
		if worst := slices.Max(p.Load); worst > 4.0/3*bound+1e-9 {
			t.Errorf("n=%d: most loaded shard %g, more than 4/3 of %g", n, worst, bound)
		}
	}
	// Without estimates, runs are dealt out evenly by count.
	p := NewPlan(s, &fakeExp{}, 5)
	for i, l := range p.Load {
		if l != 4 && l != 5 {
			t.Errorf("shard %d has %g runs of 24 over 5 shards", i, l)
		}
	}
}

// badCost returns unusable estimates.
type badCost struct{ *fakeExp }

func (badCost) Cost(r Run) float64 {
	switch r.Seed {
	case 1:
		return math.NaN()
	case 2:
		return -1
	}
	return math.Inf(1)
}

func TestPlanSurvivesBadEstimates(t *testing.T) {
	s := parse(t, sweepSpec)
	p := NewPlan(s, badCost{}, 4)
	if n := len(p.Of(0)) + len(p.Of(1)) + len(p.Of(2)) + len(p.Of(3)); n != 24 {
		t.Errorf("%d runs planned, want 24", n)
	}
	for _, c := range p.Cost {
		if !(c > 0) || math.IsInf(c, 0) {
			t.Errorf("cost %v", c)
		}
	}
}

// TestExecuteShard: Execute with a shard runs that shard's runs alone, under
// the header of the whole sweep.
func TestExecuteShard(t *testing.T) {
	s := parse(t, sweepSpec)
	exp, err := NewRegistry(fakeKind{}).Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	plan := NewPlan(s, exp, 3)
	total := 0
	for i := range 3 {
		res, err := Execute(context.Background(), s, exp, Options{Parallel: 2, Shard: Shard{i, 3}})
		if err != nil {
			t.Fatal(err)
		}
		want := plan.Of(i)
		if len(res.Runs) != len(want) {
			t.Fatalf("shard %d: %d runs, want %d", i, len(res.Runs), len(want))
		}
		for k, r := range res.Runs {
			if r.Policy != want[k].Policy || r.Scenario != want[k].Scenario || r.Seed != want[k].Seed {
				t.Errorf("shard %d run %d: %s/%s/%d, want %+v", i, k, r.Scenario, r.Policy, r.Seed, want[k])
			}
		}
		if !slices.Equal(res.Seeds, []int64{1, 2, 3}) || len(res.Scenarios) != 4 || len(res.Policies) != 2 {
			t.Errorf("shard %d header: %+v", i, res)
		}
		total += len(res.Runs)
	}
	if total != 24 {
		t.Errorf("%d runs over the shards, want 24", total)
	}
}
