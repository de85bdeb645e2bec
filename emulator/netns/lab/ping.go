//go:build linux && !nonetns

package lab

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// PingResult is the outcome of PingAll: for every ordered pair of hosts,
// whether an ICMP echo got its reply, and the round-trip time.
type PingResult struct {
	Hosts []string
	// OK[i][j] and RTT[i][j]: host i pinged host j (i ≠ j).
	OK  [][]bool
	RTT [][]time.Duration
	Err [][]error
}

// Sent and Received count the echo requests of the result.
func (p *PingResult) Sent() int { return len(p.Hosts) * (len(p.Hosts) - 1) }

// Received counts the echo replies.
func (p *PingResult) Received() int {
	k := 0
	for i := range p.OK {
		for j := range p.OK[i] {
			if i != j && p.OK[i][j] {
				k++
			}
		}
	}
	return k
}

// Write prints the result as Mininet's pingall does: a line per host with
// the hosts it reached (X for those it did not), then the share dropped.
func (p *PingResult) Write(w io.Writer) {
	fmt.Fprintln(w, "*** Ping: testing ping reachability")
	for i, h := range p.Hosts {
		fmt.Fprintf(w, "%s ->", h)
		for j, o := range p.Hosts {
			if i == j {
				continue
			}
			if p.OK[i][j] {
				fmt.Fprintf(w, " %s", o)
			} else {
				fmt.Fprint(w, " X")
			}
		}
		fmt.Fprintln(w)
	}
	sent, got := p.Sent(), p.Received()
	dropped := 0.0
	if sent > 0 {
		dropped = 100 * float64(sent-got) / float64(sent)
	}
	fmt.Fprintf(w, "*** Results: %.0f%% dropped (%d/%d received)\n", dropped, got, sent)
}

// PingAll pings every host from every other host, one ICMP echo each with
// timeout (default 1 s) to answer; sources run in parallel, each pinging
// its destinations in turn.
func (r *Run) PingAll(ctx context.Context, timeout time.Duration) *PingResult {
	if timeout <= 0 {
		timeout = time.Second
	}
	hosts := r.Net.Topology.Hosts()
	res := &PingResult{}
	for _, h := range hosts {
		res.Hosts = append(res.Hosts, h.Name)
	}
	k := len(hosts)
	res.OK, res.RTT, res.Err = make([][]bool, k), make([][]time.Duration, k), make([][]error, k)
	var wg sync.WaitGroup
	for i, src := range hosts {
		res.OK[i], res.RTT[i], res.Err[i] = make([]bool, k), make([]time.Duration, k), make([]error, k)
		wg.Go(func() {
			for j, dst := range hosts {
				if i == j {
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, timeout)
				rtt, err := r.Net.Ping(pctx, src.Name, dst.IP, i*k+j)
				cancel()
				res.OK[i][j], res.RTT[i][j], res.Err[i][j] = err == nil, rtt, err
			}
		})
	}
	wg.Wait()
	return res
}
