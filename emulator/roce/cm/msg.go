package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The connection manager's datagrams (UDP, Config.Port). They carry what
// IB CM's REQ, REP, RTU, REJ, DREQ and DREP MADs carry for an RC
// connection over RoCEv2 (IBTA chapter 12), in a compact layout of our
// own, big-endian:
//
//	 0  magic "RCM" and version 1                  4
//	 4  type                                        1
//	 5  reject reason                               1
//	 6  private data length                         2
//	 8  sender's communication id                   4
//	12  receiver's communication id                 4
//	    (in a REQ: 0, or the passive side's id of the connection
//	    the REQ re-establishes)
//	16  service id                                  8
//	24  QP number (24 bits)                         4
//	28  starting PSN (24 bits)                      4
//	32  path MTU                                    2
//	34  responder resources                         1
//	35  initiator depth                             1
//	36  retry count                                 1
//	37  RNR retry count                             1
//	38  local ACK timeout                           1
//	39  reserved                                    1
//	40  advertised region: address 8, R_Key 4, length 4
//	56  private data (at most MaxPrivate bytes)

// Message types.
const (
	TypeREQ  = 1
	TypeREP  = 2
	TypeRTU  = 3
	TypeREJ  = 4
	TypeDREQ = 5
	TypeDREP = 6
)

// Reject reasons.
const (
	RejectNoListener = 1 // no listener for the service
	RejectConsumer   = 2 // the listener's application refused
	RejectInvalid    = 3 // parameters the passive side cannot use
	RejectResources  = 4 // no QP could be created
	RejectStale      = 5 // a REQ re-establishes a connection the passive side does not have
)

// HeaderLen is the size of a message without private data; MaxPrivate is
// the most private data a message carries (IB CM's REP carries 196
// bytes).
const (
	HeaderLen  = 56
	MaxPrivate = 196
)

var magic = [4]byte{'R', 'C', 'M', 1}

// Region is a memory region a side advertises to its peer: where the peer
// may read or write with RDMA (rdma_cm applications put this in private
// data).
type Region struct {
	Addr   uint64
	RKey   uint32
	Length uint32
}

// Msg is a decoded connection-manager datagram.
type Msg struct {
	Type      uint8
	Reason    uint8
	LocalID   uint32
	RemoteID  uint32
	Service   uint64
	QPN       uint32
	PSN       uint32
	MTU       uint16
	RespRes   uint8
	InitDepth uint8
	RetryCnt  uint8
	RNRRetry  uint8
	Timeout   uint8
	Region    Region
	Private   []byte // aliases the decoded buffer
}

// ErrMalformed is returned by Decode.
var ErrMalformed = errors.New("cm: malformed message")

// Append appends the encoding of m to b.
func (m *Msg) Append(b []byte) []byte {
	var h [HeaderLen]byte
	copy(h[0:4], magic[:])
	h[4] = m.Type
	h[5] = m.Reason
	binary.BigEndian.PutUint16(h[6:], uint16(len(m.Private)))
	binary.BigEndian.PutUint32(h[8:], m.LocalID)
	binary.BigEndian.PutUint32(h[12:], m.RemoteID)
	binary.BigEndian.PutUint64(h[16:], m.Service)
	binary.BigEndian.PutUint32(h[24:], m.QPN&0xffffff)
	binary.BigEndian.PutUint32(h[28:], m.PSN&0xffffff)
	binary.BigEndian.PutUint16(h[32:], m.MTU)
	h[34], h[35], h[36], h[37], h[38] = m.RespRes, m.InitDepth, m.RetryCnt, m.RNRRetry, m.Timeout
	binary.BigEndian.PutUint64(h[40:], m.Region.Addr)
	binary.BigEndian.PutUint32(h[48:], m.Region.RKey)
	binary.BigEndian.PutUint32(h[52:], m.Region.Length)
	b = append(b, h[:]...)
	return append(b, m.Private...)
}

// Decode parses a message. Private aliases b. It checks the magic and
// version, the type, the lengths and the 24-bit fields; it never panics.
func Decode(b []byte) (Msg, error) {
	var m Msg
	if len(b) < HeaderLen {
		return m, fmt.Errorf("%w: %d bytes, want at least %d", ErrMalformed, len(b), HeaderLen)
	}
	if [4]byte(b[0:4]) != magic {
		return m, fmt.Errorf("%w: bad magic or version % x", ErrMalformed, b[0:4])
	}
	m.Type, m.Reason = b[4], b[5]
	if m.Type < TypeREQ || m.Type > TypeDREP {
		return m, fmt.Errorf("%w: type %d", ErrMalformed, m.Type)
	}
	n := int(binary.BigEndian.Uint16(b[6:]))
	if n > MaxPrivate || len(b) != HeaderLen+n {
		return m, fmt.Errorf("%w: %d bytes of private data in a %d-byte message", ErrMalformed, n, len(b))
	}
	m.LocalID = binary.BigEndian.Uint32(b[8:])
	m.RemoteID = binary.BigEndian.Uint32(b[12:])
	m.Service = binary.BigEndian.Uint64(b[16:])
	m.QPN = binary.BigEndian.Uint32(b[24:])
	m.PSN = binary.BigEndian.Uint32(b[28:])
	if m.QPN > 0xffffff || m.PSN > 0xffffff {
		return m, fmt.Errorf("%w: QPN %#x or PSN %#x wider than 24 bits", ErrMalformed, m.QPN, m.PSN)
	}
	m.MTU = binary.BigEndian.Uint16(b[32:])
	m.RespRes, m.InitDepth, m.RetryCnt, m.RNRRetry, m.Timeout = b[34], b[35], b[36], b[37], b[38]
	if b[39] != 0 {
		return m, fmt.Errorf("%w: reserved byte %#x is not zero", ErrMalformed, b[39])
	}
	m.Region = Region{Addr: binary.BigEndian.Uint64(b[40:]), RKey: binary.BigEndian.Uint32(b[48:]), Length: binary.BigEndian.Uint32(b[52:])}
	m.Private = b[HeaderLen:]
	return m, nil
}
