package roce

import "fmt"

// Opcode is the operation of a send work request (ibv_wr_opcode).
type Opcode uint8

// Send work request opcodes.
const (
	OpSend     Opcode = iota // SEND: consumes a receive WQE at the peer
	OpSendImm                // SEND with immediate data
	OpWrite                  // RDMA WRITE into the peer's region
	OpWriteImm               // RDMA WRITE with immediate: also consumes a receive WQE
	OpRead                   // RDMA READ from the peer's region
)

var opcodeNames = [...]string{"send", "send_imm", "write", "write_imm", "read"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("opcode(%d)", uint8(o))
}

// SGE is a scatter/gather element: Length bytes at virtual address Addr
// of the local region whose key is LKey. A work request has one.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr with one SGE).
type SendWR struct {
	ID     uint64 // returned in the completion
	Op     Opcode
	Local  SGE    // the data to send or write; where READ data goes
	Remote uint64 // WRITE, READ: virtual address at the peer
	RKey   uint32 // WRITE, READ: the peer region's key
	Imm    uint32 // SendImm, WriteImm: immediate data (host order; big-endian on the wire)
	// Signaled asks for a completion on success (errors always
	// complete); QPConfig.SignalAll makes every request signaled.
	Signaled bool
	// Solicited sets the BTH solicited-event bit of the last packet.
	Solicited bool
}

// RecvWR is a receive work request: where an incoming SEND (or the
// immediate of a WRITE with immediate) lands.
type RecvWR struct {
	ID    uint64
	Local SGE
}

// Status is a completion's status (ibv_wc_status).
type Status uint8

// Completion statuses.
const (
	StatusSuccess Status = iota
	StatusLocLenErr
	StatusLocQPOpErr
	StatusLocProtErr
	StatusWRFlushErr
	StatusBadRespErr
	StatusLocAccessErr
	StatusRemInvReqErr
	StatusRemAccessErr
	StatusRemOpErr
	StatusRetryExcErr
	StatusRNRRetryExcErr
)

var statusNames = [...]string{"success", "local_length_error", "local_qp_operation_error", "local_protection_error",
	"flushed", "bad_response", "local_access_error", "remote_invalid_request", "remote_access_error",
	"remote_operational_error", "retry_exceeded", "rnr_retry_exceeded"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// WCOpcode says what a completion completes (ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend         WCOpcode = iota // a SEND (with or without immediate)
	WCWrite                        // an RDMA WRITE (with or without immediate)
	WCRead                         // an RDMA READ
	WCRecv                         // a receive WQE consumed by a SEND
	WCRecvWriteImm                 // a receive WQE consumed by an RDMA WRITE with immediate
)

var wcNames = [...]string{"send", "write", "read", "recv", "recv_write_imm"}

func (o WCOpcode) String() string {
	if int(o) < len(wcNames) {
		return wcNames[o]
	}
	return fmt.Sprintf("wc(%d)", uint8(o))
}

// Completion is a work completion (ibv_wc).
type Completion struct {
	WRID    uint64
	Status  Status
	Opcode  WCOpcode
	QPN     uint32
	ByteLen uint32 // bytes received (receives) or transferred
	Imm     uint32 // valid if HasImm
	HasImm  bool
}

func (c Completion) String() string {
	s := fmt.Sprintf("qp=%d wr=%d %s %s len=%d", c.QPN, c.WRID, c.Opcode, c.Status, c.ByteLen)
	if c.HasImm {
		s += fmt.Sprintf(" imm=%#x", c.Imm)
	}
	return s
}

// CQ is a completion queue. Instead of being polled it delivers each
// completion to its handler, on the device's goroutine, once the packet or
// verb that produced it has been fully processed; the handler may post
// new work. Completions of one work queue arrive in order.
type CQ struct {
	dev     *Device
	handler func(Completion)
	n       uint64
}

// CreateCQ returns a completion queue that calls handler for every
// completion (nil: completions are only counted).
func (d *Device) CreateCQ(handler func(Completion)) *CQ {
	return &CQ{dev: d, handler: handler}
}

// Completions returns how many completions the queue has delivered.
func (cq *CQ) Completions() uint64 { return cq.n }

func (cq *CQ) deliver(wc Completion) {
	cq.n++
	if wc.Status != StatusSuccess {
		cq.dev.c.CompletionsErr++
	}
	if cq.handler != nil {
		cq.handler(wc)
	}
}
