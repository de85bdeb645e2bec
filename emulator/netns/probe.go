//go:build linux && !nonetns

package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// Ping sends one ICMP echo request from host from to address to and
// returns the round-trip time of the reply. It uses a datagram-less raw
// ICMP socket opened inside from's namespace, so no ping binary is needed.
func (n *Network) Ping(ctx context.Context, from string, to netip.Addr, seq int) (time.Duration, error) {
	var conn *icmp.PacketConn
	if err := n.Do(from, func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return 0, fmt.Errorf("ping from %s: %w", from, err)
	}
	defer conn.Close()
	id := os.Getpid() & 0xffff
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq & 0xffff, Data: []byte("tracebed-ping")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return 0, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(2 * time.Second)
	}
	conn.SetDeadline(deadline)
	start := time.Now()
	if _, err := conn.WriteTo(b, &net.IPAddr{IP: net.IP(to.AsSlice())}); err != nil {
		return 0, fmt.Errorf("ping %s from %s: %w", to, from, err)
	}
	buf := make([]byte, 1500)
	for {
		k, peer, err := conn.ReadFrom(buf)
		if err != nil {
			return 0, fmt.Errorf("ping %s from %s: %w", to, from, err)
		}
		rtt := time.Since(start)
		m, err := icmp.ParseMessage(1, buf[:k])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		if !ok || e.ID != id || e.Seq != seq&0xffff || peer.String() != to.String() {
			continue
		}
		return rtt, nil
	}
}

// TCPCheck opens a TCP connection from host from to host to (a listener on
// an ephemeral port in to's namespace), sends size bytes through it and
// checks they arrive intact. It proves checksums and MTU-sized segments
// survive the path in both directions.
func (n *Network) TCPCheck(ctx context.Context, from, to string, size int) error {
	dst := n.Topology.Node(to)
	if dst == nil {
		return fmt.Errorf("tcp check: no node %q", to)
	}
	var ln net.Listener
	if err := n.Do(to, func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(dst.IP.String(), "0"))
		return err
	}); err != nil {
		return fmt.Errorf("tcp check: listen on %s: %w", to, err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i*7 + i>>8)
	}
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		buf := make([]byte, size)
		if _, err := io.ReadFull(c, buf); err != nil {
			got <- fmt.Errorf("receive: %w", err)
			return
		}
		for i := range buf {
			if buf[i] != payload[i] {
				got <- fmt.Errorf("byte %d differs", i)
				return
			}
		}
		_, err = c.Write([]byte("ok"))
		got <- err
	}()
	var c net.Conn
	d := net.Dialer{}
	if err := n.Do(from, func() error {
		var err error
		c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort(dst.IP.String(), strconv.Itoa(port)))
		return err
	}); err != nil {
		return fmt.Errorf("tcp check %s→%s: %w", from, to, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(payload); err != nil {
		return fmt.Errorf("tcp check %s→%s: send: %w", from, to, err)
	}
	ack := make([]byte, 2)
	if _, err := io.ReadFull(c, ack); err != nil {
		return fmt.Errorf("tcp check %s→%s: no acknowledgement: %w", from, to, err)
	}
	if err := <-got; err != nil {
		return fmt.Errorf("tcp check %s→%s: %w", from, to, err)
	}
	if string(ack) != "ok" {
		return errors.New("tcp check: bad acknowledgement")
	}
	return nil
}

// Blast sends UDP datagrams with size-byte payloads from host from to host
// to as fast as a batched socket allows (64 per sendmmsg) and returns the
// frames per second that arrived at the receiver's interface over d,
// counted after 200 ms of warm-up. The receiver's socket exists (no ICMP
// unreachable comes back) but is not read: frames are counted at the
// interface, so the rate is the network's, not the receiving stack's.
func (n *Network) Blast(ctx context.Context, from, to string, size int, d time.Duration) (float64, error) {
	dst := n.Topology.Node(to)
	if dst == nil || n.Topology.Node(from) == nil {
		return 0, fmt.Errorf("blast: no host %q or %q", from, to)
	}
	var rx, tx net.PacketConn
	if err := n.Do(to, func() (err error) { rx, err = net.ListenPacket("udp4", dst.IP.String()+":9000"); return }); err != nil {
		return 0, fmt.Errorf("blast: %w", err)
	}
	defer rx.Close()
	if err := n.Do(from, func() (err error) { tx, err = net.ListenPacket("udp4", ":0"); return }); err != nil {
		return 0, fmt.Errorf("blast: %w", err)
	}
	defer tx.Close()
	pc := ipv4.NewPacketConn(tx)
	addr := &net.UDPAddr{IP: net.IP(dst.IP.AsSlice()), Port: 9000}
	msgs := make([]ipv4.Message, 64)
	payload := make([]byte, size)
	for i := range msgs {
		msgs[i] = ipv4.Message{Buffers: [][]byte{payload}, Addr: addr}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			pc.WriteBatch(msgs, 0)
		}
	}()
	defer func() { close(stop); <-done }()
	rxPackets := func() (uint64, error) {
		h, err := n.Handle(to)
		if err != nil {
			return 0, err
		}
		defer h.Delete()
		l, err := h.LinkByName(dst.Ports[0].Iface)
		if err != nil {
			return 0, err
		}
		return l.Attrs().Statistics.RxPackets, nil
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(200 * time.Millisecond); err != nil { // steady state
		return 0, err
	}
	p0, err := rxPackets()
	if err != nil {
		return 0, fmt.Errorf("blast: %w", err)
	}
	t0 := time.Now()
	if err := sleep(d); err != nil {
		return 0, err
	}
	p1, err := rxPackets()
	if err != nil {
		return 0, fmt.Errorf("blast: %w", err)
	}
	return float64(p1-p0) / time.Since(t0).Seconds(), nil
}
