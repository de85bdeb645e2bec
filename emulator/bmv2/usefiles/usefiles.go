// Package usefiles reads and writes the pcap files of bmv2's --use-files
// mode, in which simple_switch reads every port's input from pN_in.pcap
// and writes its output to pN_out.pcap (for -i N@pN). The packet-vector
// tests of the P4 programs replay their vectors on bmv2 this way.
//
// It depends on nothing of tracebed's, so that the data planes' own tests
// can use it.
package usefiles

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Frame is one frame arriving on a port.
type Frame struct {
	Port int
	Data []byte
}

// Iface is the interface name of port in simple_switch's -i PORT@IFACE.
func Iface(port int) string { return fmt.Sprintf("p%d", port) }

// Args returns the -i arguments that bind ports 1..ports to their files.
func Args(ports int) []string {
	var args []string
	for p := 1; p <= ports; p++ {
		args = append(args, "-i", fmt.Sprintf("%d@%s", p, Iface(p)))
	}
	return args
}

// Encode returns each port's input pcap (index 1..ports) as its file
// header and its records, frames in order gap apart: what WriteInputs
// writes, for a writer that sends the header before the records (a named
// pipe the switch opens at start and reads from later).
func Encode(ports int, frames []Frame, gap time.Duration) (headers, records [][]byte, err error) {
	headers, records = make([][]byte, ports+1), make([][]byte, ports+1)
	bufs := make([]*bytes.Buffer, ports+1)
	writers := make([]*pcapgo.Writer, ports+1)
	for p := 1; p <= ports; p++ {
		bufs[p] = new(bytes.Buffer)
		writers[p] = pcapgo.NewWriter(bufs[p])
		if err := writers[p].WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
			return nil, nil, err
		}
		headers[p] = bytes.Clone(bufs[p].Bytes())
		bufs[p].Reset()
	}
	start := time.Unix(1_700_000_000, 0)
	for i, fr := range frames {
		if fr.Port < 1 || fr.Port > ports {
			return nil, nil, fmt.Errorf("frame %d on port %d: ports are 1 to %d", i, fr.Port, ports)
		}
		ci := gopacket.CaptureInfo{Timestamp: start.Add(time.Duration(i) * gap), CaptureLength: len(fr.Data), Length: len(fr.Data)}
		if err := writers[fr.Port].WritePacket(ci, fr.Data); err != nil {
			return nil, nil, err
		}
	}
	for p := 1; p <= ports; p++ {
		records[p] = bufs[p].Bytes()
	}
	return headers, records, nil
}

// InputPath is port's input file in dir.
func InputPath(dir string, port int) string { return filepath.Join(dir, Iface(port)+"_in.pcap") }

// WriteInputs writes one input pcap per port 1..ports into dir, frames in
// order, gap apart: simple_switch reads all ports' files in timestamp
// order, so the gap orders frames across ports.
func WriteInputs(dir string, ports int, frames []Frame, gap time.Duration) error {
	headers, records, err := Encode(ports, frames, gap)
	if err != nil {
		return err
	}
	for p := 1; p <= ports; p++ {
		if err := os.WriteFile(InputPath(dir, p), append(headers[p], records[p]...), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ReadOutputs reads the frames simple_switch wrote to each port's output
// file, by port. A port whose file is missing has no frames.
func ReadOutputs(dir string, ports int) (map[int][][]byte, error) {
	out := map[int][][]byte{}
	for p := 1; p <= ports; p++ {
		f, err := os.Open(filepath.Join(dir, Iface(p)+"_out.pcap"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		frames, err := readAll(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("port %d: %w", p, err)
		}
		out[p] = frames
	}
	return out, nil
}

func readAll(f *os.File) ([][]byte, error) {
	r, err := pcapgo.NewReader(f)
	if errors.Is(err, io.EOF) {
		return nil, nil // created, nothing written yet
	}
	if err != nil {
		return nil, err
	}
	var frames [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return frames, nil // a file still being written ends mid-record
		}
		if err != nil {
			return frames, err
		}
		frames = append(frames, data)
	}
}
