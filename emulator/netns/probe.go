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
	"runtime"
	"strconv"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
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

// BlastOptions describe a Blast: UDP datagrams from host From's port
// SrcPort (0: any) to Dst, the payloads sent in turn.
type BlastOptions struct {
	From     string
	SrcPort  int
	Dst      netip.AddrPort
	Payloads [][]byte
	// CountAt is the host whose interface counts the frames that arrive
	// (empty: the host that has Dst's address).
	CountAt string
	// Warmup passes before counting starts (default 200 ms); Duration is
	// how long frames are counted (default 1 s).
	Warmup, Duration time.Duration
}

// BlastResult is what a Blast measured while counting.
type BlastResult struct {
	Frames uint64        // frames that arrived at CountAt's interface
	Window time.Duration // how long they were counted
	// SenderCPU is the CPU time of the sending thread, user and system:
	// the kernel's work done in its context included (through a Linux
	// bridge, the whole path to the receiver's socket).
	SenderCPU time.Duration
}

// PPS returns the frames per second that arrived.
func (r BlastResult) PPS() float64 { return float64(r.Frames) / r.Window.Seconds() }

// Blast sends datagrams as fast as one socket with batched sends
// (sendmmsg, 64 datagrams a call) allows, from a thread of its own, and
// counts the frames that arrive at CountAt's first interface: the packet
// rate of the path, whatever forwards it. The receiving socket need not
// exist or be read; frames are counted at the interface.
func (n *Network) Blast(ctx context.Context, o BlastOptions) (BlastResult, error) {
	if o.Warmup == 0 {
		o.Warmup = 200 * time.Millisecond
	}
	if o.Duration == 0 {
		o.Duration = time.Second
	}
	dstHost := ""
	for _, h := range n.Topology.Hosts() {
		if h.IP == o.Dst.Addr() {
			dstHost = h.Name
		}
	}
	at := o.CountAt
	if at == "" {
		at = dstHost
	}
	node := n.Topology.Node(at)
	if node == nil || len(node.Ports) == 0 || len(o.Payloads) == 0 {
		return BlastResult{}, fmt.Errorf("blast: no host %q to count at, or no payloads", at)
	}
	if dstHost != "" {
		// A socket for the datagrams (not read), so that no ICMP port
		// unreachable comes back.
		var rx net.PacketConn
		if err := n.Do(dstHost, func() (err error) { rx, err = net.ListenPacket("udp4", o.Dst.String()); return }); err != nil {
			return BlastResult{}, fmt.Errorf("blast to %s: %w", dstHost, err)
		}
		defer rx.Close()
	}
	var tx net.PacketConn
	if err := n.Do(o.From, func() (err error) { tx, err = net.ListenPacket("udp4", ":"+strconv.Itoa(o.SrcPort)); return }); err != nil {
		return BlastResult{}, fmt.Errorf("blast from %s: %w", o.From, err)
	}
	defer tx.Close()
	pc := ipv4.NewPacketConn(tx)
	addr := net.UDPAddrFromAddrPort(o.Dst)
	msgs := make([]ipv4.Message, 64*max(1, (len(o.Payloads)+63)/64))
	for i := range msgs {
		msgs[i] = ipv4.Message{Buffers: [][]byte{o.Payloads[i%len(o.Payloads)]}, Addr: addr}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	tid := make(chan int, 1)
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		for i := 0; ; i = (i + 64) % len(msgs) {
			select {
			case <-stop:
				return
			default:
			}
			pc.WriteBatch(msgs[i:i+64], 0)
		}
	}()
	defer func() { close(stop); <-done }()
	rx := func() (uint64, error) {
		h, err := n.Handle(at)
		if err != nil {
			return 0, err
		}
		defer h.Delete()
		l, err := h.LinkByName(node.Ports[0].Iface)
		if err != nil {
			return 0, err
		}
		return l.Attrs().Statistics.RxPackets, nil
	}
	cpu := threadCPUClock(<-tid)
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := wait(o.Warmup); err != nil {
		return BlastResult{}, err
	}
	p0, err := rx()
	if err != nil {
		return BlastResult{}, fmt.Errorf("blast: %w", err)
	}
	t0, c0 := time.Now(), cpu()
	if err := wait(o.Duration); err != nil {
		return BlastResult{}, err
	}
	p1, err := rx()
	if err != nil {
		return BlastResult{}, fmt.Errorf("blast: %w", err)
	}
	return BlastResult{Frames: p1 - p0, Window: time.Since(t0), SenderCPU: cpu() - c0}, nil
}

// threadCPUClock returns a function reading the CPU time of thread tid of
// this process (its CLOCK_THREAD_CPUTIME_ID, as pthread_getcpuclockid
// makes it: clock id ^tid<<3 | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD).
func threadCPUClock(tid int) func() time.Duration {
	id := int32(^tid<<3 | 6)
	return func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(id, &ts); err != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
}
