package analysis

import (
	"math"
	"slices"
)

// Paired is a paired comparison of two policies over the seeds of a
// scenario: one difference per seed, both policies having run the same
// seed (the same job trace), with the mean difference and its 95%
// confidence interval (Student's t with N−1 degrees of freedom). The
// spread of per-seed differences measures the policies; the spread of
// each policy's own values mostly measures the traces.
type Paired struct {
	Diffs  []float64 // per seed, in seed order
	Mean   float64
	Lo, Hi float64 // the 95% confidence interval of Mean; NaN for one seed
}

// N is the number of seeds compared.
func (p Paired) N() int { return len(p.Diffs) }

// Significant reports whether the confidence interval excludes zero.
func (p Paired) Significant() bool { return p.N() > 1 && (p.Lo > 0 || p.Hi < 0) }

// PairedRelative compares metric of policy b against policy a in a
// scenario, seed by seed: 100 × (b − a) ÷ b, the percentage by which a is
// below b (a's reduction of the metric against b). Seeds that one of the
// policies lacks, or where b is 0, are left out.
func (r *Results) PairedRelative(scenario, metric, a, b string) Paired {
	va, vb := map[int64]float64{}, map[int64]float64{}
	for _, run := range r.Runs {
		if run.Scenario != scenario {
			continue
		}
		v, ok := run.Metrics[metric]
		if !ok {
			continue
		}
		switch run.Policy {
		case a:
			va[run.Seed] = v
		case b:
			vb[run.Seed] = v
		}
	}
	var seeds []int64
	for s := range va {
		if y, ok := vb[s]; ok && y != 0 {
			seeds = append(seeds, s)
		}
	}
	slices.Sort(seeds)
	var p Paired
	for _, s := range seeds {
		p.Diffs = append(p.Diffs, 100*(vb[s]-va[s])/vb[s])
	}
	p.Mean, p.Lo, p.Hi = MeanCI95(p.Diffs)
	return p
}

// MeanCI95 returns the mean of xs and its two-sided 95% confidence
// interval by Student's t; the interval is NaN for fewer than two values.
func MeanCI95(xs []float64) (mean, lo, hi float64) {
	n := len(xs)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	if n < 2 {
		return mean, math.NaN(), math.NaN()
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	half := TQuantile975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n))
	return mean, mean - half, mean + half
}

// TQuantile975 is the 0.975 quantile of Student's t distribution with df
// degrees of freedom (the half-width factor of a two-sided 95% interval):
// exact to three decimals from tables up to 30, then the normal
// approximation with the first Cornish–Fisher term.
func TQuantile975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	switch {
	case df < 1:
		return math.NaN()
	case df <= len(table):
		return table[df-1]
	}
	const z = 1.959964
	return z + (z*z*z+z)/(4*float64(df))
}
