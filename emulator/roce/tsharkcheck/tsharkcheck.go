// Package tsharkcheck checks captures of RoCEv2 traffic against a tool
// that is not tracebed's: tshark's InfiniBand dissector (Wireshark's
// packet-infiniband.c, registered on UDP 4791 as "RRoCE") must decode
// every RoCEv2 frame of a pcap or pcapng file without a malformed-packet
// or error-level expert report, and the invariant CRC that tshark finds
// in each frame (the field infiniband.invariant.crc, which tshark shows
// but, up to Wireshark 4.0 at least, does not verify) must be the CRC-32
// that this package recomputes from the captured bytes with its own
// masking, independently of package emulator/roce/wire.
//
// Tests of the RoCE device, the roce-demo experiment and the command line
// use it; they skip with a message where tshark is missing.
package tsharkcheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/pcapgo"
)

// Tshark returns the path of tshark, or an error that says how to get it.
func Tshark() (string, error) {
	p, err := exec.LookPath("tshark")
	if err != nil {
		return "", errors.New("tshark is not installed (apt-get install -y tshark)")
	}
	return p, nil
}

// Report is what Check found.
type Report struct {
	Frames     int         // frames in the file
	RoCE       int         // frames to UDP port 4791
	Opcodes    map[int]int // RoCE frames by BTH opcode, as tshark decoded it
	Malformed  []string    // frames tshark could not decode, or decoded otherwise than as InfiniBand
	ICRCErrors []string    // frames whose ICRC is wrong, or not where tshark found it
}

// OK reports whether every RoCEv2 frame decoded cleanly with a right ICRC.
func (r *Report) OK() bool { return len(r.Malformed) == 0 && len(r.ICRCErrors) == 0 }

func (r *Report) String() string {
	s := fmt.Sprintf("%d frames, %d RoCEv2, opcodes %v", r.Frames, r.RoCE, r.Opcodes)
	for _, m := range r.Malformed {
		s += "\n  malformed: " + m
	}
	for _, m := range r.ICRCErrors {
		s += "\n  ICRC: " + m
	}
	return s
}

// payloadProtocols are the heuristic dissectors tshark tries on
// InfiniBand payloads (RPC over RDMA, SMB Direct, NVMe over RDMA, …).
// RoCEv2 traffic of tracebed carries opaque application bytes, which those
// heuristics may mistake for their protocol and then call malformed; they
// are turned off so that the check is about the RoCEv2 headers.
var payloadProtocols = []string{"rpcordma", "smb_direct", "nvme-rdma", "iser", "lnet", "smc", "infiniband_sdp", "fcoib", "infiniband.eoib"}

// Check decodes path (pcap or pcapng) with tshark and checks every frame
// to UDP port 4791.
func Check(ctx context.Context, path string) (*Report, error) {
	bin, err := Tshark()
	if err != nil {
		return nil, err
	}
	frames, err := readFrames(path)
	if err != nil {
		return nil, err
	}
	args := []string{"-r", path, "-n", "-d", "udp.port==4791,infiniband"}
	for _, p := range payloadProtocols {
		args = append(args, "--disable-protocol", p)
	}
	args = append(args, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=;",
		"-e", "frame.number", "-e", "udp.dstport", "-e", "frame.protocols", "-e", "infiniband.bth.opcode",
		"-e", "infiniband.invariant.crc", "-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "_ws.expert.message")
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("tshark: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	r := &Report{Frames: len(frames), Opcodes: map[int]int{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		for len(f) < 8 {
			f = append(f, "")
		}
		num, err := strconv.Atoi(f[0])
		if err != nil || num < 1 || num > len(frames) {
			return nil, fmt.Errorf("tshark: unexpected line %q", sc.Text())
		}
		if !hasPort(f[1], 4791) {
			continue
		}
		r.RoCE++
		where := fmt.Sprintf("frame %d", num)
		if !strings.Contains(f[2], "infiniband") {
			r.Malformed = append(r.Malformed, fmt.Sprintf("%s: decoded as %s, not InfiniBand", where, f[2]))
			continue
		}
		if f[5] != "" || strings.Contains(f[2], "_ws.malformed") {
			r.Malformed = append(r.Malformed, fmt.Sprintf("%s: %s", where, f[7]))
			continue
		}
		if sev := errorExpert(f[6], f[7]); sev != "" {
			r.Malformed = append(r.Malformed, fmt.Sprintf("%s: %s", where, sev))
			continue
		}
		if op, err := strconv.Atoi(f[3]); err == nil {
			r.Opcodes[op]++
		}
		want, carried, err := icrc(frames[num-1])
		if err != nil {
			r.ICRCErrors = append(r.ICRCErrors, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		shown, err := strconv.ParseUint(strings.TrimPrefix(f[4], "0x"), 16, 32)
		switch {
		case f[4] == "" && carried == want:
			// tshark shows no ICRC for an opcode it does not know
			// (Wireshark 4.0 and CNP, 0x81): the recomputation decides.
		case err != nil && f[4] != "":
			r.ICRCErrors = append(r.ICRCErrors, fmt.Sprintf("%s: tshark shows ICRC %q", where, f[4]))
		case f[4] != "" && bswap(uint32(shown)) != carried:
			r.ICRCErrors = append(r.ICRCErrors, fmt.Sprintf("%s: tshark's ICRC field %#08x is not the frame's last 4 bytes", where, shown))
		case carried != want:
			r.ICRCErrors = append(r.ICRCErrors, fmt.Sprintf("%s: ICRC %#08x, computed %#08x", where, carried, want))
		}
	}
	return r, sc.Err()
}

func hasPort(field string, port int) bool {
	for _, p := range strings.Split(field, ";") {
		if p == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// errorExpert returns the expert messages of error severity (PI_ERROR,
// 0x00800000, or above).
func errorExpert(sevs, msgs string) string {
	if sevs == "" {
		return ""
	}
	ms := strings.Split(msgs, ";")
	var bad []string
	for i, s := range strings.Split(sevs, ";") {
		v, err := strconv.ParseUint(s, 0, 32)
		if err == nil && v >= 0x00800000 {
			m := "error"
			if i < len(ms) {
				m = ms[i]
			}
			bad = append(bad, m)
		}
	}
	return strings.Join(bad, "; ")
}

func bswap(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.LittleEndian.Uint32(b[:])
}

// icrc recomputes the ICRC of an Ethernet/IPv4/UDP frame from its bytes
// (IBTA annex A17: 8 bytes of ones, then the IPv4 header with TOS, TTL
// and checksum as ones, the UDP header with the checksum as ones, the BTH
// with byte 4 as ones, the rest up to the ICRC) and returns it with the
// ICRC the frame carries.
func icrc(f []byte) (want, carried uint32, err error) {
	if len(f) < 14+20+8+16 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return 0, 0, errors.New("not an IPv4 frame holding a BTH and an ICRC")
	}
	ihl := int(f[14]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(f[16:]))
	if ihl < 20 || total < ihl+8+16 || 14+total > len(f) {
		return 0, 0, fmt.Errorf("IPv4 lengths %d/%d in a %d-byte frame", ihl, total, len(f))
	}
	pkt := bytes.Clone(f[14 : 14+total]) // Ethernet padding excluded
	pkt[1] = 0xff
	pkt[8] = 0xff
	pkt[10], pkt[11] = 0xff, 0xff
	pkt[ihl+6], pkt[ihl+7] = 0xff, 0xff
	pkt[ihl+8+4] = 0xff
	n := len(pkt) - 4
	data := append(bytes.Repeat([]byte{0xff}, 8), pkt[:n]...)
	return crc32.ChecksumIEEE(data), binary.LittleEndian.Uint32(pkt[n:]), nil
}

// readFrames reads every frame of a pcap or pcapng file.
func readFrames(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	if len(data) >= 4 && binary.LittleEndian.Uint32(data) == 0x0a0d0d0a { // pcapng section header
		r, err = pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
	} else {
		r, err = pcapgo.NewReader(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var frames [][]byte
	for {
		b, _, err := r.ReadPacketData()
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		frames = append(frames, b)
	}
}
