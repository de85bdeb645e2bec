// Package units parses and formats the physical quantities that appear in
// tracebed's input files: link rates, byte sizes and durations.
//
// Every parser accepts the spellings a networking researcher types
// ("100Gbps", "10G", "64KiB", "1500B", "2us") and returns an error that says
// what would have been accepted; none of them panics. Rates, sizes and
// durations need a unit: a bare number is an error that suggests one
// ("rate: 100" could mean 100 bit/s or 100 Gbps; tracebed does not guess),
// except 0, which needs none.
package units

import (
	"fmt"
	"math"
	mathbits "math/bits"
	"strconv"
	"strings"
	"time"
)

// Rate is a bit rate in bits per second.
type Rate int64

// Common rates.
const (
	BitPerSecond Rate = 1
	Kbps              = 1000 * BitPerSecond
	Mbps              = 1000 * Kbps
	Gbps              = 1000 * Mbps
	Tbps              = 1000 * Gbps
)

var rateUnits = []struct {
	suffix string
	mult   Rate
}{
	// Longest suffixes first so that "Gbps" is not read as "G" + "bps".
	{"tbit/s", Tbps}, {"gbit/s", Gbps}, {"mbit/s", Mbps}, {"kbit/s", Kbps}, {"bit/s", BitPerSecond},
	{"tbps", Tbps}, {"gbps", Gbps}, {"mbps", Mbps}, {"kbps", Kbps}, {"bps", BitPerSecond},
	{"t", Tbps}, {"g", Gbps}, {"m", Mbps}, {"k", Kbps},
}

// ParseRate parses a rate such as "100Gbps", "2.5Gbit/s", "10G" or "800Mbps".
// The unit is required ("100" is an error that suggests "100Gbps"). The
// rate must be positive and finite.
func ParseRate(s string) (Rate, error) {
	num, mult, err := splitUnit(s, rateUnits, 0)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w (want e.g. 100Gbps, 2.5Gbit/s, 800Mbps)", s, err)
	}
	if mult == 0 {
		return 0, fmt.Errorf("rate %q has no unit: write %sGbps (or Mbps, Kbps, bps)", s, strings.TrimSpace(s))
	}
	v := num * float64(mult)
	if v <= 0 || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("rate %q must be positive (e.g. 100Gbps)", s)
	}
	if v < 1 {
		return 0, fmt.Errorf("rate %q is below 1 bit/s", s)
	}
	return Rate(math.Round(v)), nil
}

// String formats r with the largest unit that keeps it readable, e.g. "100Gbps".
func (r Rate) String() string {
	switch {
	case r >= Tbps && r%(Tbps/1000) == 0:
		return trimFloat(float64(r)/float64(Tbps)) + "Tbps"
	case r >= Gbps && r%(Gbps/1000) == 0:
		return trimFloat(float64(r)/float64(Gbps)) + "Gbps"
	case r >= Mbps && r%(Mbps/1000) == 0:
		return trimFloat(float64(r)/float64(Mbps)) + "Mbps"
	case r >= Kbps && r%(Kbps/1000) == 0:
		return trimFloat(float64(r)/float64(Kbps)) + "Kbps"
	}
	return strconv.FormatInt(int64(r), 10) + "bps"
}

// Bytes is a size in bytes.
type Bytes int64

// Common sizes. Decimal and binary prefixes are both accepted by ParseBytes.
const (
	Byte Bytes = 1
	KB         = 1000 * Byte
	MB         = 1000 * KB
	GB         = 1000 * MB
	KiB        = 1024 * Byte
	MiB        = 1024 * KiB
	GiB        = 1024 * MiB
)

var byteUnits = []struct {
	suffix string
	mult   Bytes
}{
	{"kib", KiB}, {"mib", MiB}, {"gib", GiB},
	{"kb", KB}, {"mb", MB}, {"gb", GB},
	{"ki", KiB}, {"mi", MiB}, {"gi", GiB},
	{"k", KB}, {"m", MB}, {"g", GB},
	{"b", Byte},
}

// ParseBytes parses a size such as "1500B", "64KiB", "1MB" or "2GiB". The
// unit is required ("1500" is an error that suggests "1500B"), except for
// a bare 0. The size must not be negative.
func ParseBytes(s string) (Bytes, error) {
	num, mult, err := splitUnit(s, byteUnits, 0)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w (want e.g. 1500B, 64KiB, 1MB)", s, err)
	}
	if mult == 0 {
		if num == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("size %q has no unit: write %sB (or KiB, MiB, KB, MB)", s, strings.TrimSpace(s))
	}
	v := num * float64(mult)
	if v < 0 || v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q must be between 0 and 4EiB", s)
	}
	return Bytes(math.Round(v)), nil
}

// String formats b in the largest binary unit that divides it, e.g. "64KiB".
func (b Bytes) String() string {
	switch {
	case b >= GiB && b%GiB == 0:
		return strconv.FormatInt(int64(b/GiB), 10) + "GiB"
	case b >= MiB && b%MiB == 0:
		return strconv.FormatInt(int64(b/MiB), 10) + "MiB"
	case b >= KiB && b%KiB == 0:
		return strconv.FormatInt(int64(b/KiB), 10) + "KiB"
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// ParseDuration parses a non-negative duration in Go syntax ("1us", "2.5ms",
// "500ns"); a bare "0" is zero.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want a number with a unit such as 500ns, 2us, 1.5ms", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return d, nil
}

// TransmitTime returns how long a frame of size bytes occupies a link of rate r,
// in picoseconds, rounded up so that a link is never faster than its rate.
func TransmitTime(size Bytes, r Rate) int64 {
	bits := uint64(size) * 8
	hi, lo := mathbits.Mul64(bits, 1e12)
	if hi >= uint64(r) {
		return math.MaxInt64
	}
	q, rem := mathbits.Div64(hi, lo, uint64(r))
	if rem != 0 {
		q++
	}
	return int64(q)
}

// splitUnit splits s into a number and the multiplier of its unit; a bare
// number gets def.
func splitUnit[T ~int64](s string, units []struct {
	suffix string
	mult   T
}, def T) (float64, T, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, 0, fmt.Errorf("empty value")
	}
	lower := strings.ToLower(t)
	mult := def
	for _, u := range units {
		if strings.HasSuffix(lower, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	num, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(num) || math.IsInf(num, 0) {
		return 0, 0, fmt.Errorf("not a number with a known unit")
	}
	return num, mult, nil
}

func trimFloat(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// UnmarshalScalar implements yamlx.ScalarUnmarshaler.
func (r *Rate) UnmarshalScalar(s string) error {
	v, err := ParseRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// UnmarshalScalar implements yamlx.ScalarUnmarshaler.
func (b *Bytes) UnmarshalScalar(s string) error {
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a non-negative time.Duration read from "2us"-style text.
type Duration time.Duration

// UnmarshalScalar implements yamlx.ScalarUnmarshaler.
func (d *Duration) UnmarshalScalar(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// String formats d as time.Duration does, but with "us" for microseconds so
// that the text is plain ASCII.
func (d Duration) String() string {
	return strings.Replace(time.Duration(d).String(), "µs", "us", 1)
}

// Fraction is a number in [0, 1], such as a loss probability or a memory ratio.
// It is written as 0.05 or as 5%.
type Fraction float64

// ParseFraction parses "0.05" or "5%" into a Fraction in [0, 1].
func ParseFraction(s string) (Fraction, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	if p, ok := strings.CutSuffix(t, "%"); ok {
		t, scale = strings.TrimSpace(p), 100
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a fraction (want e.g. 0.05 or 5%%)", s)
	}
	f /= scale
	if f < 0 || f > 1 {
		return 0, fmt.Errorf("%q is outside [0, 1] (want e.g. 0.05 or 5%%)", s)
	}
	return Fraction(f), nil
}

// UnmarshalScalar implements yamlx.ScalarUnmarshaler.
func (f *Fraction) UnmarshalScalar(s string) error {
	v, err := ParseFraction(s)
	if err != nil {
		return err
	}
	*f = v
	return nil
}
