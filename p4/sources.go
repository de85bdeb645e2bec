// Package p4 holds the P4-16 sources of tracebed's data planes, built into
// the binary so that the bmv2 substrate (package emulator/bmv2) can compile
// them with p4c wherever tracebed runs. Each program's Go twin, which the
// Go switch and the simulation run, sits in the subdirectory of the same
// name.
package p4

import (
	"embed"
	"fmt"
)

//go:embed fwd/fwd.p4 ina/ina.p4 farmem/farmem.p4 freeina/freeina.p4
var sources embed.FS

// Source returns the P4-16 source of program ("fwd", "ina", "farmem", "freeina").
func Source(program string) ([]byte, error) {
	data, err := sources.ReadFile(program + "/" + program + ".p4")
	if err != nil {
		return nil, fmt.Errorf("p4: no P4 source for program %q (have fwd, ina, farmem, freeina)", program)
	}
	return data, nil
}
