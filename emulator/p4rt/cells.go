package p4rt

import (
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
)

// Indexed counters (P4Runtime 1.4.1 §9.3.2) and registers (§9.7): arrays
// of cells the program reads and writes through accessors.

// CounterCells gives a Target access to a counter array's cells.
type CounterCells struct {
	Get func(i int) (packets, bytes uint64)
	Set func(i int, packets, bytes uint64)
}

// PacketCounter is the CounterCells of a packets-only counter stored as a
// slice (a written byte count is ignored).
func PacketCounter(cells []uint64) CounterCells {
	return CounterCells{
		Get: func(i int) (uint64, uint64) { return cells[i], 0 },
		Set: func(i int, pk, _ uint64) { cells[i] = pk },
	}
}

// RegisterCells gives a Target access to a register array's cells, as
// unsigned values of the register's width (two's complement for int<W>).
type RegisterCells struct {
	Get func(i int) uint64
	Set func(i int, v uint64)
}

type cellArray struct {
	kind, name string
	id         uint32
	size       int64
	width      int // registers
	signed     bool
	get        func(i int) (uint64, uint64)
	set        func(i int, a, b uint64)
}

func (ca *cellArray) counter(i int) *p4v1.CounterData {
	pk, by := ca.get(i)
	return &p4v1.CounterData{PacketCount: int64(pk), ByteCount: int64(by)}
}

func (ca *cellArray) setCounter(i int, d *p4v1.CounterData) {
	ca.set(i, uint64(d.GetPacketCount()), uint64(d.GetByteCount()))
}

func (ca *cellArray) register(i int) *p4v1.P4Data {
	v, _ := ca.get(i)
	b := EncodeUint(v)
	if ca.signed && ca.width > 0 && ca.width < 64 && v>>(ca.width-1)&1 == 1 {
		b = EncodeInt(int64(v | ^uint64(0)<<ca.width)) // sign-extend
	} else if ca.signed && ca.width == 64 {
		b = EncodeInt(int64(v))
	}
	return &p4v1.P4Data{Data: &p4v1.P4Data_Bitstring{Bitstring: b}}
}

// Counter binds the named counter array to its cells.
func (t *Target) Counter(name string, c CounterCells) error {
	id, err := t.names.CounterID(name)
	if err != nil {
		return err
	}
	ca := t.counters[id]
	ca.get, ca.set = c.Get, c.Set
	return nil
}

// Register binds the named register array to its cells. Only bit<W> and
// int<W> registers of up to 64 bits are supported.
func (t *Target) Register(name string, c RegisterCells) error {
	id, err := t.names.RegisterID(name)
	if err != nil {
		return err
	}
	ca := t.regs[id]
	if ca.width < 1 || ca.width > 64 {
		return errf(codes.Unimplemented, "register %s: only bit<W> and int<W> cells of 1 to 64 bits are supported", name)
	}
	ca.get = func(i int) (uint64, uint64) { return c.Get(i), 0 }
	ca.set = func(i int, v, _ uint64) { c.Set(i, v) }
	return nil
}

// cells finds the array a write or read addresses.
func cellsOf(m map[uint32]*cellArray, kind string, id uint32) (*cellArray, error) {
	if len(m) == 0 {
		return nil, errf(codes.Unimplemented, "this program has no %ss", kind)
	}
	ca := m[id]
	if ca == nil {
		return nil, errf(codes.NotFound, "no %s with id %#x", kind, id)
	}
	if ca.get == nil {
		return nil, errf(codes.Unimplemented, "%s %s is not implemented by this program", kind, ca.name)
	}
	return ca, nil
}

// indexRange checks an index (§9.3.2, §9.7: negative is INVALID_ARGUMENT,
// past the end OUT_OF_RANGE) and returns the cells it selects; no index
// selects them all.
func (ca *cellArray) indexRange(index *p4v1.Index) (lo, hi int, err error) {
	if index == nil {
		return 0, int(ca.size), nil
	}
	i := index.GetIndex()
	if i < 0 {
		return 0, 0, errf(codes.InvalidArgument, "%s %s: negative index %d", ca.kind, ca.name, i)
	}
	if i >= ca.size {
		return 0, 0, errf(codes.OutOfRange, "%s %s: index %d outside 0..%d", ca.kind, ca.name, i, ca.size-1)
	}
	return int(i), int(i) + 1, nil
}

// writeCells applies a MODIFY of a counter or register: value, given the
// array, checks the written data and returns the function that writes one
// cell (nil: nothing to write).
func (t *Target) writeCells(typ p4v1.Update_Type, m map[uint32]*cellArray, kind string, id uint32, index *p4v1.Index, value func(*cellArray) (func(int), error)) error {
	if typ != p4v1.Update_MODIFY {
		return errf(codes.InvalidArgument, "%s entries can only be modified, not %v", kind, typ)
	}
	ca, err := cellsOf(m, kind, id)
	if err != nil {
		return err
	}
	lo, hi, err := ca.indexRange(index)
	if err != nil {
		return err
	}
	set, err := value(ca)
	if err != nil || set == nil {
		return err
	}
	for i := lo; i < hi; i++ {
		set(i)
	}
	return nil
}

func (t *Target) writeRegister(typ p4v1.Update_Type, re *p4v1.RegisterEntry) error {
	return t.writeCells(typ, t.regs, "register", re.GetRegisterId(), re.GetIndex(), func(ca *cellArray) (func(int), error) {
		bs, ok := re.GetData().GetData().(*p4v1.P4Data_Bitstring)
		if !ok {
			return nil, errf(codes.InvalidArgument, "register %s: data must be a bitstring of %d bits", ca.name, ca.width)
		}
		var v uint64
		if ca.signed {
			x, err := DecodeInt(bs.Bitstring, ca.width)
			if err != nil {
				return nil, prefix(err, "register %s", ca.name)
			}
			v = uint64(x)
			if ca.width < 64 {
				v &= 1<<ca.width - 1
			}
		} else {
			x, err := DecodeUint(bs.Bitstring, ca.width)
			if err != nil {
				return nil, prefix(err, "register %s", ca.name)
			}
			v = x
		}
		return func(i int) { ca.set(i, v, 0) }, nil
	})
}

// readCells yields the cells a counter or register query selects: id 0 is
// every array the program implements, no index every cell.
func (t *Target) readCells(m map[uint32]*cellArray, kind string, id uint32, index *p4v1.Index, entity func(*cellArray, int) *p4v1.Entity, yield func(*p4v1.Entity) error) error {
	var arrays []*cellArray
	if id != 0 {
		ca, err := cellsOf(m, kind, id)
		if err != nil {
			return err
		}
		arrays = []*cellArray{ca}
	} else {
		for _, ca := range t.cellList {
			if ca.kind == kind && ca.get != nil {
				arrays = append(arrays, ca)
			}
		}
	}
	for _, ca := range arrays {
		lo, hi, err := ca.indexRange(index)
		if err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			if err := yield(entity(ca, i)); err != nil {
				return err
			}
		}
	}
	return nil
}
