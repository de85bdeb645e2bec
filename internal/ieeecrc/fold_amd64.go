//go:build amd64 && !purego

package ieeecrc

import "golang.org/x/sys/cpu"

// haveFold: the CPU and the OS support the 512-bit registers and their
// carry-less multiplication.
var haveFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ

// fold256 returns the CRC register after p from the register state
// (hash/crc32's crc is the complement of the register). len(p) is a
// multiple of 256, at least 256.
//
//go:noescape
func fold256(state uint32, p []byte) uint32

// fold16 is fold256 for a length that is a multiple of 16, at least 16,
// along one chain.
//
//go:noescape
func fold16(state uint32, p []byte) uint32
