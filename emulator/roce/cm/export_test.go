package cm

import "net/netip"

// Inject hands m a datagram from a peer, as its socket does.
func Inject(m *Manager, from netip.Addr, b []byte) { m.recv(from, b) }

// IDs returns c's communication ids: its own and its peer's.
func IDs(c *Conn) (local, remote uint32) { return c.localID, c.remoteID }
