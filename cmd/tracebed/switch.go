//go:build linux && !nonetns

package main

import (
	"github.com/spf13/cobra"

	"github.com/tracebed/tracebed/emulator/switch/switchcmd"
)

// switchCommand is 'tracebed switch' (package switchcmd), with its
// command-line errors mapped to exit code 2.
func (a *app) switchCommand() *cobra.Command {
	cmd := switchcmd.Command(a.stderr, a.programs)
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		err := run(cmd, args)
		if switchcmd.IsInputError(err) {
			return badInput(err)
		}
		return err
	}
	return cmd
}
