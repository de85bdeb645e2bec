package roce

import (
	"fmt"
	"strings"
)

// Access is a set of access rights of a memory region or a QP.
type Access uint8

// Access rights (ibv_access_flags). Local reads are always allowed.
const (
	AccessLocalWrite  Access = 1 << iota // the device may write the region for this host: receives, READ data
	AccessRemoteWrite                    // peers may RDMA WRITE it (needs AccessLocalWrite)
	AccessRemoteRead                     // peers may RDMA READ it
)

func (a Access) String() string {
	var s []string
	for _, x := range []struct {
		f    Access
		name string
	}{{AccessLocalWrite, "local_write"}, {AccessRemoteWrite, "remote_write"}, {AccessRemoteRead, "remote_read"}} {
		if a&x.f != 0 {
			s = append(s, x.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// MR is a registered memory region: Buf, seen by the device at virtual
// addresses [Addr, Addr+len(Buf)). Peers address it with RKey, local work
// requests with LKey. Its fields must not be changed.
type MR struct {
	LKey, RKey uint32
	Addr       uint64
	Buf        []byte
	Access     Access

	dev   *Device
	valid bool
}

// RegMR registers buf with the given access rights (ibv_reg_mr). The
// device gives the region a virtual address of its own (page-aligned, not
// overlapping any other region of the device) and keys: lkey = rkey =
// index << 8 | an 8-bit generation, as rdma_rxe makes them, so a key of a
// deregistered region does not open the next region in its slot.
func (d *Device) RegMR(buf []byte, access Access) (*MR, error) {
	if access&AccessRemoteWrite != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: remote write access needs local write access too", ErrInvalid)
	}
	if uint64(len(buf)) > 1<<40 {
		return nil, fmt.Errorf("%w: region of %d bytes", ErrInvalid, len(buf))
	}
	var idx int
	var gen uint32
	if n := len(d.mrFree); n > 0 {
		idx = d.mrFree[n-1]
		d.mrFree = d.mrFree[:n-1]
		gen = (d.mrs[idx].LKey + 1) & 0xff
		if idx == 0 && gen == 0 {
			gen = 1 // key 0 is never valid
		}
	} else {
		idx = len(d.mrs)
		d.mrs = append(d.mrs, nil)
		if idx == 0 {
			gen = 1
		}
	}
	if idx >= 1<<24 {
		return nil, fmt.Errorf("%w: too many memory regions", ErrInvalid)
	}
	key := uint32(idx)<<8 | gen
	mr := &MR{LKey: key, RKey: key, Addr: d.nextVA, Buf: buf, Access: access, dev: d, valid: true}
	d.nextVA += (uint64(len(buf)) + 4095) &^ 4095
	d.nextVA += 4096 // a guard page between regions
	d.mrs[idx] = mr
	return mr, nil
}

// Dereg deregisters the region (ibv_dereg_mr): its keys stop working at
// once, for work already posted too (which then fails with a protection
// error).
func (mr *MR) Dereg() error {
	if !mr.valid {
		return fmt.Errorf("%w: region already deregistered", ErrInvalid)
	}
	mr.valid = false
	mr.dev.mrFree = append(mr.dev.mrFree, int(mr.LKey>>8))
	return nil
}

// SGE returns a scatter/gather element for n bytes of the region starting
// off bytes into it.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.Addr + uint64(off), Length: uint32(n), LKey: mr.LKey}
}

// mr returns the valid region whose key is key, or nil.
func (d *Device) mr(key uint32) *MR {
	i := int(key >> 8)
	if i >= len(d.mrs) {
		return nil
	}
	mr := d.mrs[i]
	if mr == nil || !mr.valid || mr.LKey != key {
		return nil
	}
	return mr
}

// span returns the bytes [va, va+n) of the region, or false when they are
// not all inside it.
func (mr *MR) span(va uint64, n uint64) ([]byte, bool) {
	size := uint64(len(mr.Buf))
	if va < mr.Addr || n > size || va-mr.Addr > size-n {
		return nil, false
	}
	off := va - mr.Addr
	return mr.Buf[off : off+n], true
}

// check looks up the region of key for n bytes at va with the rights
// want; it returns the bytes.
func (d *Device) check(key uint32, va uint64, n uint64, want Access) ([]byte, bool) {
	mr := d.mr(key)
	if mr == nil || mr.Access&want != want {
		return nil, false
	}
	return mr.span(va, n)
}
