package allreduce

import (
	"fmt"
	"math"
)

// Gradients travel as int32 fixed point with a per-job scale, as in SwitchML
// (which exchanges a per-block exponent; tracebed uses one scale per job,
// agreed before training). A value x becomes round(x·scale). For n workers
// every quantised value must satisfy |q| ≤ MaxInt32/n, so that no partial
// or final sum can overflow; Quantize rejects a value outside that range
// instead of clipping it.

// MaxQuantized returns the largest |q| a quantised value of a job with n
// workers may have.
func MaxQuantized(n int) int32 { return int32(math.MaxInt32 / max(n, 1)) }

// ScaleFor returns the largest power of two s such that maxAbs·s fits
// MaxQuantized(n): the scale a job picks from a bound on its gradients.
func ScaleFor(maxAbs float64, n int) float64 {
	if maxAbs <= 0 || math.IsNaN(maxAbs) || math.IsInf(maxAbs, 0) {
		return 1
	}
	_, e := math.Frexp(float64(MaxQuantized(n)) / maxAbs)
	return math.Ldexp(1, e-1)
}

// Quantize writes round(x[i]·scale) into dst[i] for a job of n workers. It
// fails, naming the first offending index, when a value is not finite or
// its quantised magnitude exceeds MaxQuantized(n).
func Quantize(dst []int32, x []float32, scale float64, n int) error {
	if len(dst) < len(x) {
		return fmt.Errorf("quantize: %d values into %d", len(x), len(dst))
	}
	if scale <= 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("quantize: scale %v, want a positive finite number", scale)
	}
	limit := float64(MaxQuantized(n))
	for i, v := range x {
		q := math.Round(float64(v) * scale)
		if math.IsNaN(q) || math.Abs(q) > limit {
			return fmt.Errorf("quantize: value %d (%g) scaled by %g is outside ±%d, the bound for %d workers: %w", i, v, scale, int32(limit), n, ErrOverflow)
		}
		dst[i] = int32(q)
	}
	return nil
}

// Dequantize writes q[i]/scale into dst[i].
func Dequantize(dst []float32, q []int32, scale float64) {
	for i, v := range q {
		dst[i] = float32(float64(v) / scale)
	}
}
