//go:build !amd64 || purego

package ieeecrc

const haveFold = false

func fold256(uint32, []byte) uint32 { panic("ieeecrc: no fold on this machine") }

func fold16(uint32, []byte) uint32 { panic("ieeecrc: no fold on this machine") }
