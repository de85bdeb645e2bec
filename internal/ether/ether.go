// Package ether holds the Ethernet address type that topologies (data) and
// the engine's frame codec (emulator/frame) share, so that neither needs
// the other.
package ether

import "fmt"

// MAC is an Ethernet address.
type MAC [6]byte

// String formats m as six colon-separated hexadecimal bytes.
func (m MAC) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}
