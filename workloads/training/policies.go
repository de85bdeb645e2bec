package training

import (
	"github.com/tracebed/tracebed/systems/atp"
	"github.com/tracebed/tracebed/systems/dynaina"
	"github.com/tracebed/tracebed/systems/inasched"
	"github.com/tracebed/tracebed/systems/mine"
	"github.com/tracebed/tracebed/systems/noina"
	"github.com/tracebed/tracebed/systems/switchml"
	"github.com/tracebed/tracebed/workloads/training/fabric"
)

// Policies returns the INA policies an ina spec may name. This is the one
// place they are listed: each policy package registers its name, its
// parameters and their decoder (inasched.Policy). mine is lab 3's
// (labs/3-your-own-policy): a policy for students to change.
func Policies() *inasched.Registry {
	r := inasched.NewRegistry()
	for _, register := range []func(*inasched.Registry) error{noina.Register, switchml.Register, atp.Register, dynaina.Register, mine.Register} {
		if err := register(r); err != nil {
			panic(err) // two policies of one name: a programming error
		}
	}
	return r
}

// Window implements inasched.Network: the line-rate window of the
// scenario's network.
func (s *scenario) Window() int { return fabric.LineRateDemand(s.top, s.net) }
