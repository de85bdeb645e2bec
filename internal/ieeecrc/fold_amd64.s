//go:build amd64 && !purego

#include "textflag.h"

// Folding constants of the bit-reflected CRC-32 (polynomial 0x104C11DB7)
// for a distance of D bits, as hash/crc32's CLMUL code uses them: the low
// quadword multiplies a 128-bit lane's low half, the high quadword its
// high half. Low = reflect32(x^(D+32) mod P) << 1, high =
// reflect32(x^(D-32) mod P) << 1; TestConstants recomputes them. The
// 512-bit code broadcasts a pair to the four 128-bit lanes of a register.

// D = 2048: one step of the four chains (256 bytes).
DATA k2048<>+0(SB)/8, $0x11542778a
DATA k2048<>+8(SB)/8, $0x1322d1430
GLOBL k2048<>(SB), RODATA, $16

// D = 512: from one chain's block to the next (64 bytes); hash/crc32's
// r2r1.
DATA k512<>+0(SB)/8, $0x154442bd4
DATA k512<>+8(SB)/8, $0x1c6e41596
GLOBL k512<>(SB), RODATA, $16

// D = 128: from one 16-byte lane to the next; hash/crc32's r4r3.
DATA k128<>+0(SB)/8, $0x1751997d0
DATA k128<>+8(SB)/8, $0xccaa009e
GLOBL k128<>(SB), RODATA, $16

// x^64 mod P, as the low quadword: folds 96 bits to 64.
DATA k64<>+0(SB)/8, $0x163cd6124
DATA k64<>+8(SB)/8, $0
GLOBL k64<>(SB), RODATA, $16

// Barrett reduction from 64 to 32 bits: the low quadword is P (33 bits,
// reflected), the high one mu = floor(x^64 / P) (reflected).
DATA barrett<>+0(SB)/8, $0x1db710641
DATA barrett<>+8(SB)/8, $0x1f7011641
GLOBL barrett<>(SB), RODATA, $16

// FOLD moves the 128-bit lanes of a, D bits ahead, onto next: each lane's
// halves times the constants of D in k, XORed with each other and with
// next (VPTERNLOGD 0x96 is a three-way XOR). t is clobbered.
#define FOLD(k, a, t, next) \
	VPCLMULQDQ $0x11, k, a, t \
	VPCLMULQDQ $0x00, k, a, a \
	VPTERNLOGD $0x96, next, t, a

// REDUCE leaves in AX the CRC register after the 16 bytes in X1 from a
// zero register: their polynomial times x^32 modulo P. It folds the first
// 8 bytes onto the last 8 (128 to 96 bits), the first 4 of those onto the
// rest (96 to 64), and reduces the 64 bits to 32 by Barrett's method (the
// quotient estimated with mu, its multiple of P subtracted). It clobbers
// X0, X2, X3 and R8.
#define REDUCE \
	VMOVDQU    k128<>(SB), X0 \
	VPCLMULQDQ $0x10, X0, X1, X2 \
	VPSRLDQ    $8, X1, X1 \
	VPXOR      X2, X1, X1 \
	MOVL       $0xffffffff, R8 \
	VMOVD      R8, X3 \
	VMOVDQU    k64<>(SB), X0 \
	VPAND      X3, X1, X2 \
	VPSRLDQ    $4, X1, X1 \
	VPCLMULQDQ $0x00, X0, X2, X2 \
	VPXOR      X2, X1, X1 \
	VMOVDQU    barrett<>(SB), X0 \
	VPAND      X3, X1, X2 \
	VPCLMULQDQ $0x10, X0, X2, X2 \
	VPAND      X3, X2, X2 \
	VPCLMULQDQ $0x00, X0, X2, X2 \
	VPXOR      X2, X1, X1 \
	VPEXTRD    $1, X1, AX

// func fold256(state uint32, p []byte) uint32
TEXT ·fold256(SB), NOSPLIT, $0-36
	MOVL state+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	// Z1–Z4 hold the four chains: bytes 0–63, 64–127, 128–191 and
	// 192–255 of each 256-byte step. The state goes into p's first 4
	// bytes (VMOVD zeroes the rest of Z0).
	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VMOVD     AX, X0
	VPXORQ    Z0, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX
	VBROADCASTI32X4 k2048<>(SB), Z0

loop:
	// Each lane moves 2048 bits ahead onto the next step's bytes; the
	// chains do not wait for each other.
	CMPQ       CX, $256
	JB         join
	VMOVDQU64  (SI), Z11
	VMOVDQU64  64(SI), Z12
	VMOVDQU64  128(SI), Z13
	VMOVDQU64  192(SI), Z14
	FOLD(Z0, Z1, Z5, Z11)
	FOLD(Z0, Z2, Z6, Z12)
	FOLD(Z0, Z3, Z7, Z13)
	FOLD(Z0, Z4, Z8, Z14)
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop

join:
	// The last step's chains are consecutive blocks: fold each 512 bits
	// ahead onto the next, leaving one block, aligned at p's end.
	VBROADCASTI32X4 k512<>(SB), Z0
	FOLD(Z0, Z1, Z5, Z2)
	FOLD(Z0, Z1, Z5, Z3)
	FOLD(Z0, Z1, Z5, Z4)

	// The block's four lanes are consecutive too: fold each 128 bits
	// ahead onto the next, leaving 16 bytes to reduce.
	VEXTRACTI32X4 $1, Z1, X2
	VEXTRACTI32X4 $2, Z1, X3
	VEXTRACTI32X4 $3, Z1, X4
	VMOVDQU       k128<>(SB), X0
	FOLD(X0, X1, X5, X2)
	FOLD(X0, X1, X5, X3)
	FOLD(X0, X1, X5, X4)
	REDUCE
	MOVL AX, ret+32(FP)
	VZEROUPPER
	RET

// func fold16(state uint32, p []byte) uint32
TEXT ·fold16(SB), NOSPLIT, $0-36
	MOVL       state+0(FP), AX
	MOVQ       p_base+8(FP), SI
	MOVQ       p_len+16(FP), CX
	VMOVDQU    (SI), X1
	VMOVD      AX, X0
	VPXOR      X0, X1, X1
	ADDQ       $16, SI
	SUBQ       $16, CX
	VMOVDQU    k128<>(SB), X0

loop16:
	CMPQ       CX, $16
	JB         reduce16
	VMOVDQU    (SI), X2
	FOLD(X0, X1, X5, X2)
	ADDQ       $16, SI
	SUBQ       $16, CX
	JMP        loop16

reduce16:
	REDUCE
	MOVL AX, ret+32(FP)
	VZEROUPPER
	RET
