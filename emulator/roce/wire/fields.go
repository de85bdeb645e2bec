package wire

import "time"

// PSNs are 24-bit sequence numbers that wrap. IBTA 9.7.1: of the 2^24
// values, the 2^23 at or after an expected PSN are "ahead" (valid or out of
// sequence) and the 2^23 before it are "behind" (duplicates).

// PSNMask keeps the low 24 bits.
const PSNMask = 1<<24 - 1

// PSNAdd returns p + n modulo 2^24 (n may be negative).
func PSNAdd(p uint32, n int) uint32 { return uint32(int64(p)+int64(n)) & PSNMask }

// PSNDiff returns a − b as a signed distance in [−2^23, 2^23): positive
// when a is ahead of b, negative when it is behind.
func PSNDiff(a, b uint32) int {
	d := int32((a-b)&PSNMask) << 8 >> 8 // sign-extend 24 bits
	return int(d)
}

// Credits: the low 5 bits of an ACK syndrome encode the receive WQEs the
// responder has available (IBTA table 44); 31 means "no credit
// information" (invalid, or unlimited as rdma_rxe uses it).
var creditCounts = [31]int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
	384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// CreditsUnlimited is the credit code of an ACK that carries no credit
// information.
const CreditsUnlimited = 31

// EncodeCredits returns the largest credit code whose count does not
// exceed n.
func EncodeCredits(n int) uint8 {
	c := uint8(0)
	for i, v := range creditCounts {
		if v <= n {
			c = uint8(i)
		}
	}
	return c
}

// DecodeCredits returns the receive WQEs a credit code stands for, and
// false for CreditsUnlimited.
func DecodeCredits(c uint8) (int, bool) {
	if int(c) >= len(creditCounts) {
		return 0, false
	}
	return creditCounts[c], true
}

// rnrTimers are the RNR NAK timer values (IBTA table 45), in units of
// 10 µs: code 0 is 655.36 ms, codes 1–31 run from 0.01 ms to 491.52 ms.
var rnrTimers = [32]int64{65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
	384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152}

// RNRTimer returns the delay an RNR NAK timer code asks for.
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTimers[code&0x1f]) * 10 * time.Microsecond
}

// AckTimeout returns the local ACK timeout of a QP's 5-bit timeout
// attribute: 4.096 µs × 2^t, and 0 (no timeout) for t = 0.
func AckTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << (t & 0x1f)
}
