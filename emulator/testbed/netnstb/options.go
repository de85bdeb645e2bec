package netnstb

import (
	"time"

	"github.com/tracebed/tracebed/emulator/bmv2"
)

// Switch kinds of Options.Switch.
const (
	SwitchGo   = "go"
	SwitchBMv2 = "bmv2"
)

// Switches lists the values Options.Switch accepts.
var Switches = []string{SwitchGo, SwitchBMv2}

// Networks: who builds the namespaces and links (Options.Network).
const (
	NetworkNetns   = "netns"   // tracebed itself (package emulator/netns)
	NetworkMininet = "mininet" // Mininet, with tracebed's classes (package emulator/netns/mininet)
)

// Networks lists the values Options.Network accepts.
var Networks = []string{NetworkNetns, NetworkMininet}

// Options configure New.
type Options struct {
	// Switch is "go" (default: the Go switch) or "bmv2"
	// (simple_switch_grpc with the program compiled by p4c-bm2-ss).
	Switch string
	// Network is who builds the namespaces, links, addresses, routes and
	// shaping: NetworkNetns (default) or NetworkMininet — Mininet builds
	// them (TracebedHost, PortsSwitch, TracebedLink's HTB) and the
	// switches and agents run in Mininet's namespaces as they do in
	// tracebed's own.
	Network string
	// MTU of every link; 0 means DefaultMTU.
	MTU int
	// RunID names the run's namespaces (see netns.Options); empty picks
	// a random one, starting with RunIDPrefix if set (test suites give
	// their runs a prefix of their own and check with netns.CheckClean
	// that none is left; see netns.TestRunID).
	RunID       string
	RunIDPrefix string
	// NoShaping leaves host links unshaped.
	NoShaping bool
	// L2Hosts gives hosts every other host's MAC (netns.Options.L2Hosts),
	// as bmv2 needs (it is on for bmv2 whatever this says); the Go
	// switch works with both addressings.
	L2Hosts bool
	// Spin is the Go switches' busy-poll horizon (goswitch.Config.Spin):
	// µs timing at the cost of a busy core per switch.
	Spin time.Duration
	// SwitchIO selects the Go switches' port sockets (goswitch.IOMode):
	// "auto" (empty; today AF_PACKET rings, the least kernel work per
	// frame on veths), "afpacket" or "xdp" (AF_XDP).
	SwitchIO string
	// Executable runs the Go switch command; empty means this
	// executable (see switchcmd.Options).
	Executable string
	// BMv2 configures the bmv2 switches.
	BMv2 bmv2.Options
}
