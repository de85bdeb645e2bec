// Package mininet runs tracebed topologies on Mininet (2.3, Debian's
// mininet package). Export writes a topology as a Mininet Python script; the
// script builds a Topo with the topology's addresses, MACs, port numbers,
// interface names, routes, static neighbours and HTB rates, and brings it up
// with tracebed's Mininet classes (Helper, the module tracebed_mininet.py):
// hosts addressed as 'tracebed topo up' addresses them, switches in their
// own namespaces running the Go switch or bmv2's simple_switch_grpc (or
// nothing, for tracebed to start its own), every namespace published under
// the run's name (tb-RUN-NODE), the run recorded in its directory.
//
// Start runs such a script under tracebed's control: it claims the run id,
// waits until Mininet has built the network, adopts the namespaces
// (netns.Adopt checks them against the topology) and lets the script go on
// to Mininet's CLI, a test, or to wait while tracebed's agents run in
// Mininet's host namespaces ('tracebed run --network mininet'). Stop, the
// end of the script or the end of this process (the control socket closes)
// tears everything down; 'tracebed cleanup' removes what a killed run left.
//
// Export and Helper work on every system; running Mininet (Start) needs
// Linux.
package mininet

import (
	"bytes"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"unicode"

	"github.com/tracebed/tracebed/topologies"
)

// Helper is tracebed's Mininet module, tracebed_mininet.py: TracebedHost,
// TracebedSwitch, BMv2Switch, PortsSwitch, TracebedLink and main, which
// exported scripts import from beside them.
//
//go:embed tracebed_mininet.py
var Helper []byte

// HelperFile is the file name scripts import Helper from.
const HelperFile = "tracebed_mininet.py"

// scriptName is the file name of topo's script: its name, as a Python
// module name, with .py.
func scriptName(top *topologies.Topology) string {
	return pyIdent(top.Name, false) + ".py"
}

// pyIdent turns a topology name into a Python identifier: snake_case for a
// module, CamelCase for a class.
func pyIdent(name string, class bool) string {
	var b strings.Builder
	up := class
	for _, r := range name {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if b.Len() == 0 && unicode.IsDigit(r) {
				if class {
					b.WriteString("T")
				} else {
					b.WriteString("t")
				}
			}
			if up {
				r = unicode.ToUpper(r)
			}
			b.WriteRune(r)
			up = false
		default:
			if class {
				up = true
			} else if b.Len() > 0 {
				b.WriteByte('_')
			}
		}
	}
	if b.Len() == 0 {
		return "topology"
	}
	return b.String()
}

// Export returns the Mininet script of top (see the package documentation
// and 'tracebed topo export --format mininet'). It imports Helper from its
// own directory.
func Export(top *topologies.Topology) []byte {
	d := scriptData{Name: top.Name, Class: pyIdent(top.Name, true) + "Topo", Summary: top.Summary(),
		File: top.File, Script: scriptName(top), YAML: pyString(string(top.YAML()))}
	for _, n := range top.Hosts() {
		up := n.Uplink()
		d.Hosts = append(d.Hosts, hostData{Name: n.Name, IP: n.IP.String(), MAC: n.MAC.String(),
			Gateway: up.Node.IP.String(), GatewayMAC: up.MAC.String(), Switch: up.Node.Name})
	}
	for i, n := range top.Switches() {
		d.Switches = append(d.Switches, switchData{Name: n.Name, DPID: fmt.Sprintf("%016x", i+1), IP: n.IP.String(), Ports: len(n.Ports), Queues: max(n.Queues, 1)})
	}
	for _, l := range top.Links {
		ld := linkData{A: l.A.Node.Name, B: l.B.Node.Name, PortA: l.A.Num, PortB: l.B.Num, IfA: l.A.Iface, IfB: l.B.Iface,
			MACA: portMAC(l.A), MACB: portMAC(l.B), Rate: l.Rate.String(), Delay: l.Delay.String(), Buffer: l.Buffer.String()}
		if l.Loss > 0 {
			ld.Loss = strconv.FormatFloat(100*l.Loss, 'g', -1, 64) + "% loss"
		}
		mbit := strconv.FormatFloat(float64(l.Rate)/1e6, 'f', -1, 64)
		switch {
		case l.A.Node.IsHost():
			ld.Params1 = mbit
		case l.B.Node.IsHost():
			ld.Params2 = mbit
		}
		d.Links = append(d.Links, ld)
	}
	var b bytes.Buffer
	if err := scriptTemplate.Execute(&b, d); err != nil {
		panic(err) // the template and its data are ours
	}
	return b.Bytes()
}

func portMAC(p *topologies.Port) string {
	if p.Node.IsHost() {
		return p.Node.MAC.String()
	}
	return p.MAC.String()
}

// pyString quotes s as a Python string literal spanning lines.
func pyString(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'''`, `\'\'\'`)
	return "'''\\\n" + s + "'''"
}

type scriptData struct {
	Name, Class, Summary, File, Script, YAML string
	Hosts                                    []hostData
	Switches                                 []switchData
	Links                                    []linkData
}

type hostData struct{ Name, IP, MAC, Gateway, GatewayMAC, Switch string }

type switchData struct {
	Name, DPID, IP string
	Ports, Queues  int
}

type linkData struct {
	A, B                      string
	PortA, PortB              int
	IfA, IfB, MACA, MACB      string
	Rate, Delay, Buffer, Loss string
	Params1, Params2          string // bandwidth in Mbit/s of the host end
}

var scriptTemplate = template.Must(template.New("script").Parse(`#!/usr/bin/env python3
# Mininet network of the tracebed topology "{{.Name}}" ({{.Summary}}),
# generated by 'tracebed topo export --format mininet'{{if .File}} from {{.File}}{{end}}.
# It needs tracebed_mininet.py (tracebed's Mininet classes) beside it, Mininet
# 2.3 (apt-get install mininet) and, for the Go switch, tracebed on PATH.
#
#   sudo python3 {{.Script}}                   # Go switches, then Mininet's CLI
#   sudo python3 {{.Script}} --test pingall    # as 'mn --test pingall'
#   sudo python3 {{.Script}} --program ina     # the INA data plane
#   sudo python3 {{.Script}} --switch bmv2     # simple_switch_grpc (program it over P4Runtime)
#   sudo tracebed topo cli                    # tracebed's shell on the same run
#
# Debian's mininet package is for /usr/bin/python3: with another python3 first
# on PATH (pyenv, a virtualenv), run /usr/bin/python3 {{.Script}}.
#
# Hosts and switches get the topology's addresses, MACs, port numbers and
# interface names; hosts the routes and static neighbours of 'tracebed topo
# up'. TCLink's HTB shapes each host's egress at the link's rate; link delay,
# loss and buffers are applied by tracebed's switch, which reads them from
# the topology at the end of this file.

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracebed_mininet import Topo, main  # noqa: E402


class {{.Class}}(Topo):
    """{{.Summary}}"""

    NAME = '{{.Name}}'

    def build(self):
        # Hosts: address/32 on eth0; the switch's address (gateway) on-link,
        # the default route via it, its port's MAC a permanent neighbour.
{{- range .Hosts}}
        self.addHost('{{.Name}}', ip='{{.IP}}/32', mac='{{.MAC}}',
                     gateway='{{.Gateway}}', gateway_mac='{{.GatewayMAC}}')  # via {{.Switch}}
{{- end}}

        # Switches: each in its own namespace; tb_ip is the switch's address
        # (INA packets may be addressed to it), tb_queues its ports'
        # strict-priority queues (bmv2's --priority-queues).
{{- range .Switches}}
        self.addSwitch('{{.Name}}', dpid='{{.DPID}}', tb_ip='{{.IP}}', tb_queues={{.Queues}})  # {{.Ports}} ports
{{- end}}

        # Links: ports and interfaces as in the topology; bw (Mbit/s) shapes
        # the host end with HTB. Delay, loss and buffers are the switch's.
{{- range .Links}}
        self.addLink('{{.A}}', '{{.B}}', port1={{.PortA}}, port2={{.PortB}},
                     intfName1='{{.IfA}}', intfName2='{{.IfB}}',
                     addr1='{{.MACA}}', addr2='{{.MACB}}'{{if .Params1}},
                     params1={'bw': {{.Params1}}}{{end}}{{if .Params2}},
                     params2={'bw': {{.Params2}}}{{end}})  # {{.Rate}}, {{.Delay}}, {{.Buffer}}{{if .Loss}}, {{.Loss}}{{end}}
{{- end}}


# The topology, as tracebed's switches read it.
TOPOLOGY = {{.YAML}}

if __name__ == '__main__':
    main({{.Class}}, TOPOLOGY)
`))
