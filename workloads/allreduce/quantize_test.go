package allreduce

import (
	"errors"
	"math"
	"testing"
)

func TestQuantize(t *testing.T) {
	x := []float32{0, 1.5, -2.25, 1e-3}
	q := make([]int32, len(x))
	if err := Quantize(q, x, 1024, 8); err != nil {
		t.Fatal(err)
	}
	if want := []int32{0, 1536, -2304, 1}; q[1] != want[1] || q[2] != want[2] || q[3] != want[3] {
		t.Errorf("quantised %v, want %v", q, want)
	}
	back := make([]float32, len(q))
	Dequantize(back, q, 1024)
	if back[2] != -2.25 {
		t.Errorf("dequantised %v", back)
	}
	for _, tt := range []struct {
		name  string
		x     float32
		scale float64
		n     int
	}{
		{"sum of 8 could overflow", float32(math.MaxInt32/8 + 200), 1, 8},
		{"NaN", float32(math.NaN()), 1, 2},
		{"infinity", float32(math.Inf(-1)), 1, 2},
	} {
		if err := Quantize(q, []float32{tt.x}, tt.scale, tt.n); !errors.Is(err, ErrOverflow) {
			t.Errorf("%s: error %v, want ErrOverflow", tt.name, err)
		}
	}
	if err := Quantize(q, x, 0, 2); err == nil {
		t.Error("scale 0 accepted")
	}
	for _, n := range []int{1, 2, 7, 32} {
		s := ScaleFor(3.7, n)
		if 3.7*s > float64(MaxQuantized(n)) || 3.7*s*2 <= float64(MaxQuantized(n)) {
			t.Errorf("ScaleFor(3.7, %d) = %g is not the largest fitting power of two", n, s)
		}
	}
}
