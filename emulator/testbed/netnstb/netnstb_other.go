//go:build !linux || nonetns

// Package netnstb is the testbed of the netns substrate, which needs Linux
// (network namespaces, veth links, AF_PACKET sockets). On this system it
// only says so: Check, the testbeds of NewFactory and Realtime return an
// error matching errors.ErrUnsupported.
package netnstb

import (
	"context"

	"github.com/tracebed/tracebed/emulator"
	"github.com/tracebed/tracebed/emulator/testbed"
)

// errUnsupported is what every entry point returns here.
var errUnsupported = emulator.NeedsLinux("the netns substrate")

// Check reports that no netns testbed can be built on this system.
func Check(Options) error { return errUnsupported }

// Realtime reports that SCHED_RR is not available on this system.
func Realtime(int) (restore func() error, err error) { return nil, errUnsupported }

// Factory builds netns testbeds, which this system cannot.
type Factory struct{}

// NewFactory returns a factory whose New fails.
func NewFactory(Options) *Factory { return &Factory{} }

// New reports that no netns testbed can be built on this system.
func (*Factory) New(context.Context, testbed.Config) (testbed.Testbed, error) {
	return nil, errUnsupported
}

// Close closes nothing: the factory built no testbed.
func (*Factory) Close() error { return nil }
