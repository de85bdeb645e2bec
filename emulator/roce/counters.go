package roce

import (
	"fmt"
	"strings"
)

// DropReason says why a packet was dropped without effect. IBTA calls most
// of these "silently dropped" (the requester's timer or a later NAK
// repairs the loss); they are counted, never written to memory.
type DropReason uint8

// Drop reasons.
const (
	DropShort         DropReason = iota // shorter than its headers
	DropVersion                         // BTH transport version not 0
	DropOpcode                          // not an RC opcode tracebed implements (UC, UD, atomics, …)
	DropLength                          // payload/pad inconsistent with the opcode
	DropICRC                            // ICRC mismatch
	DropUnknownQP                       // no QP with the destination QPN
	DropQPState                         // the QP cannot take it in its state (RESET, INIT, ERR; a response in RTR)
	DropPKey                            // P_Key differs from the QP's
	DropSource                          // sent from another address than the QP's peer
	DropOutOfSequence                   // a request ahead of the expected PSN (after the one NAK)
	DropDupRead                         // a duplicate READ request that matches no remembered READ
	DropStaleResponse                   // a response (ACK, NAK, READ data) for PSNs already acknowledged
	DropBadResponse                     // a response for PSNs never sent, or of an unexpected opcode
	DropRNRWait                         // a NAK received while waiting out an RNR NAK's timer
	numDropReasons
)

var dropNames = [numDropReasons]string{
	"short", "version", "opcode", "length", "icrc", "unknown_qp", "qp_state", "pkey", "source",
	"out_of_sequence", "dup_read", "stale_response", "bad_response", "rnr_wait",
}

func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return fmt.Sprintf("drop(%d)", uint8(r))
}

// DropReasons lists every reason, in order.
func DropReasons() []DropReason {
	r := make([]DropReason, numDropReasons)
	for i := range r {
		r[i] = DropReason(i)
	}
	return r
}

// Counters are a device's packet counters (all QPs together).
type Counters struct {
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	// DataPackets are the packets sent that carry message data: SEND and
	// WRITE requests, READ responses (retransmissions included).
	DataPackets uint64

	// Requester.
	Retransmitted uint64 // request packets sent again (go-back-N)
	Timeouts      uint64 // local ACK timeouts (each starts a retry, or fails the request when none is left)
	SeqNAKsRecv   uint64 // NAK-sequence-error responses received
	RNRNAKsRecv   uint64
	ImpliedNAKs   uint64 // ACKs beyond an incomplete READ: its responses were lost
	ResponseGaps  uint64 // READ responses after a missing one
	AcksRecv      uint64

	// Responder.
	AcksSent       uint64 // ACKs (not NAKs) sent
	SeqNAKsSent    uint64
	RNRNAKsSent    uint64
	ErrorNAKsSent  uint64 // invalid request, remote access and remote operational errors
	Duplicates     uint64 // duplicate requests (re-ACKed, or READs re-executed)
	ReadsReexec    uint64 // duplicate READ requests answered again
	CNPs           uint64 // congestion notification packets (ignored)
	MessagesRecv   uint64 // SEND and WRITE messages completed at the responder
	BytesPlaced    uint64 // bytes written into memory regions by the responder (SEND, WRITE)
	ReadBytesSent  uint64 // bytes of READ responses sent
	CompletionsErr uint64 // completions with a status other than success

	Drops [numDropReasons]uint64
}

// Drop counts a dropped packet.
func (c *Counters) Drop(r DropReason) { c.Drops[r]++ }

// Dropped returns the drops of all reasons.
func (c Counters) Dropped() uint64 {
	var n uint64
	for _, v := range c.Drops {
		n += v
	}
	return n
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	c.TxPackets += o.TxPackets
	c.TxBytes += o.TxBytes
	c.RxPackets += o.RxPackets
	c.RxBytes += o.RxBytes
	c.DataPackets += o.DataPackets
	c.Retransmitted += o.Retransmitted
	c.Timeouts += o.Timeouts
	c.SeqNAKsRecv += o.SeqNAKsRecv
	c.RNRNAKsRecv += o.RNRNAKsRecv
	c.ImpliedNAKs += o.ImpliedNAKs
	c.ResponseGaps += o.ResponseGaps
	c.AcksRecv += o.AcksRecv
	c.AcksSent += o.AcksSent
	c.SeqNAKsSent += o.SeqNAKsSent
	c.RNRNAKsSent += o.RNRNAKsSent
	c.ErrorNAKsSent += o.ErrorNAKsSent
	c.Duplicates += o.Duplicates
	c.ReadsReexec += o.ReadsReexec
	c.CNPs += o.CNPs
	c.MessagesRecv += o.MessagesRecv
	c.BytesPlaced += o.BytesPlaced
	c.ReadBytesSent += o.ReadBytesSent
	c.CompletionsErr += o.CompletionsErr
	for i, v := range o.Drops {
		c.Drops[i] += v
	}
}

// String lists the non-zero counters, for logs and transcripts.
func (c Counters) String() string {
	var b strings.Builder
	add := func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, " %s=%d", name, v)
		}
	}
	add("tx", c.TxPackets)
	add("rx", c.RxPackets)
	add("data", c.DataPackets)
	add("retransmitted", c.Retransmitted)
	add("timeouts", c.Timeouts)
	add("seq_naks_recv", c.SeqNAKsRecv)
	add("rnr_naks_recv", c.RNRNAKsRecv)
	add("implied_naks", c.ImpliedNAKs)
	add("response_gaps", c.ResponseGaps)
	add("acks_recv", c.AcksRecv)
	add("acks_sent", c.AcksSent)
	add("seq_naks_sent", c.SeqNAKsSent)
	add("rnr_naks_sent", c.RNRNAKsSent)
	add("error_naks_sent", c.ErrorNAKsSent)
	add("duplicates", c.Duplicates)
	add("reads_reexecuted", c.ReadsReexec)
	add("cnps", c.CNPs)
	add("messages_recv", c.MessagesRecv)
	add("bytes_placed", c.BytesPlaced)
	add("read_bytes_sent", c.ReadBytesSent)
	add("completions_err", c.CompletionsErr)
	for i, v := range c.Drops {
		add("drop_"+DropReason(i).String(), v)
	}
	return strings.TrimSpace(b.String())
}
