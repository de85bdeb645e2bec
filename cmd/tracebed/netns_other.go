//go:build !linux || nonetns

package main

import (
	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator"
)

// linuxOnly is a command that exists on Linux only (netns.go, mininet.go,
// cli.go, allreduce.go, switch.go): here it takes any arguments and exits
// with code 2 and one sentence saying so.
func (a *app) linuxOnly(use, short string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short + " (Linux only)", DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return badInput(emulator.NeedsLinux("'" + cmd.CommandPath() + "'"))
		},
	}
}

// topoNetnsCommands are the lifecycle subcommands of 'topo', which need
// network namespaces.
func (a *app) topoNetnsCommands() []*cobra.Command {
	return []*cobra.Command{
		a.linuxOnly("up TOPOLOGY", "Bring a topology up in network namespaces with Go switches"),
		a.linuxOnly("exec NODE -- COMMAND [ARG…]", "Run a command inside a node's namespace"),
		a.linuxOnly("capture NODE:PORT -w FILE.pcapng", "Capture a port's frames, both directions, as pcapng"),
		a.linuxOnly("down", "Tear a topology down: switches, namespaces, links"),
		a.linuxOnly("status", "List the topologies that are up and their switch processes"),
		a.linuxOnly("pingall", "Ping every host from every other host, as Mininet's pingall"),
		a.linuxOnly("link A B up|down", "Bring the links between nodes A and B down or up, both ends"),
		a.linuxOnly("cli", "A shell on a running topology, in the spirit of Mininet's CLI"),
		a.linuxOnly("allreduce --hosts H1,H2,… [--pool N]", "Run one INA all-reduce job on a topology that is up"),
	}
}

func (a *app) cleanupCommand() *cobra.Command {
	return a.linuxOnly("cleanup", "Remove every tracebed namespace, link and switch process")
}

func (a *app) switchCommand() *cobra.Command {
	return a.linuxOnly("switch --topology FILE --name SWITCH --grpc ADDRESS", "Run the Go switch on this network namespace's interfaces")
}

func (a *app) mininetCommand() *cobra.Command {
	return a.linuxOnly("mininet TOPOLOGY|SPEC", "Bring a topology up with Mininet and hand over Mininet's CLI")
}
