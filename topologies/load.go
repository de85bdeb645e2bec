package topologies

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tracebed/tracebed/internal/problems"
	"github.com/tracebed/tracebed/internal/units"
	"github.com/tracebed/tracebed/internal/yamlx"
)

// File is a topology as written in YAML, before validation. Generators produce
// Files, so generated and hand-written topologies go through the same checks.
type File struct {
	Name     string `yaml:"name"`
	Topology Body   `yaml:"topology"`

	// partial says DecodeFile found problems: the File holds what
	// decoded, and Build checks only that.
	partial bool
}

// errPartial is Build's answer for a File that decoded with problems and
// has none of its own: its problems are DecodeFile's.
var errPartial = errors.New("topology: decoded with problems")

// Body is the topology section of a File.
type Body struct {
	Defaults Defaults    `yaml:"defaults,omitempty"`
	Nodes    []NamedNode `yaml:"-"` // a YAML mapping, in file order
	Links    []LinkSpec  `yaml:"links"`
}

// Defaults apply to every link and switch that does not set a field itself.
type Defaults struct {
	Link   LinkAttrs `yaml:"link,omitempty"`
	Switch NodeSpec  `yaml:"switch,omitempty"`
}

// NamedNode is one entry of the nodes mapping.
type NamedNode struct {
	Name string
	Spec NodeSpec
	Pos  yamlx.Pos
	// Bad says the node failed to decode (its problem is reported by
	// DecodeFile): Build leaves it out, and the links to it, without
	// reporting them again.
	Bad bool
}

// NodeSpec holds a node's fields as written.
type NodeSpec struct {
	Kind        string            `yaml:"kind,omitempty"`
	IP          string            `yaml:"ip,omitempty"`
	Aggregators *int              `yaml:"aggregators,omitempty"`
	Queues      *int              `yaml:"queues,omitempty"`
	Latency     *units.Duration   `yaml:"latency,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	At          yamlx.Where       `yaml:"-"`
}

// LinkAttrs are the physical attributes of a link.
type LinkAttrs struct {
	Rate      *units.Rate     `yaml:"rate,omitempty"`
	Delay     *units.Duration `yaml:"delay,omitempty"`
	Buffer    *units.Bytes    `yaml:"buffer,omitempty"`
	Loss      *units.Fraction `yaml:"loss,omitempty"`
	Duplicate *units.Fraction `yaml:"duplicate,omitempty"`
	Reorder   *units.Fraction `yaml:"reorder,omitempty"`
	At        yamlx.Where     `yaml:"-"`
}

// LinkSpec is one entry of the links list.
type LinkSpec struct {
	Endpoints []string `yaml:"endpoints,required"`
	LinkAttrs `yaml:",inline"`
	// Bad says a field of the link failed to decode (its problem is
	// reported by DecodeFile): Build checks its endpoints but leaves it
	// out of the topology.
	Bad bool `yaml:"-"`
}

// Built-in defaults, used where neither a link nor the defaults section says.
const (
	DefaultRate        = 100 * units.Gbps
	DefaultBuffer      = 1 * units.MiB
	DefaultQueues      = 8
	DefaultAggregators = 0
	MaxQueues          = 64
	// MaxAggregators is the most aggregator slots a switch may have: the
	// size of the INA program's register arrays (p4/ina), 1Mi slots of
	// 64 values, 256 MiB of switch memory.
	MaxAggregators = 1 << 20
)

// notUnicast says why ip cannot be a node's address (the unspecified,
// loopback, multicast, broadcast, link-local or reserved ranges), or
// returns "".
func notUnicast(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified() || ip.As4()[0] == 0:
		return "in 0.0.0.0/8, the unspecified (this-network) range"
	case ip.IsLoopback():
		return "a loopback address"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	case ip.IsMulticast():
		return "a multicast address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.As4()[0] >= 240:
		return "in 240.0.0.0/4, a reserved range"
	}
	return ""
}

// truncate shortens a value for an error message: a file may hold a
// megabyte where a short value belongs.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Load reads and validates a topology file.
func Load(path string) (*Topology, error) {
	data, err := yamlx.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and validates a topology; file names it in errors. Every
// problem is reported, those of decoding and those of validation (up to
// problems.Max), each once.
func Parse(file string, data []byte) (*Topology, error) {
	return BuildDecoded(file)(ParseFile(file, data))
}

// BuildDecoded returns a function that builds what ParseFile or
// DecodeFile returned: the topology, or the problems of decoding (if any)
// followed by those Build finds in what did decode.
func BuildDecoded(file string) func(*File, error) (*Topology, error) {
	return func(f *File, err error) (*Topology, error) {
		if f == nil {
			return nil, err
		}
		top, berr := f.Build(file)
		if err == nil {
			return top, berr
		}
		var probs problems.List
		probs.Add(err)
		if !errors.Is(berr, errPartial) {
			probs.Add(berr)
		}
		return nil, probs.Err()
	}
}

// ParseFile parses a topology file without validating it; see DecodeFile
// for what it returns.
func ParseFile(file string, data []byte) (*File, error) {
	root, err := yamlx.Parse(file, data)
	if err != nil {
		return nil, err
	}
	return DecodeFile(file, root, "")
}

// DecodeFile decodes a topology from a YAML node; path prefixes field names
// in errors (an experiment spec may embed a topology). With an error it may
// still return the File: what decoded, the nodes and links that did not
// marked Bad, for Build to find the problems of the rest (BuildDecoded).
func DecodeFile(file string, root *yaml.Node, path string) (*File, error) {
	pairs, err := yamlx.Pairs(file, root, path)
	if err != nil {
		return nil, err
	}
	// Every section is decoded and every problem reported (up to
	// problems.Max), each with its line and field.
	var probs problems.List
	var f File
	var body *yaml.Node
	for _, p := range pairs {
		switch p.Key {
		case "name":
			probs.Add(yamlx.Decode(file, p.Value, yamlx.JoinPath(path, "name"), &f.Name))
		case "topology":
			body = p.Value
		default:
			probs.Add(yamlx.Errorf(p.Pos, yamlx.JoinPath(path, p.Key), "unknown field; known fields here: name, topology"))
		}
	}
	if body == nil {
		probs.Add(yamlx.Errorf(yamlx.NodePos(file, root), yamlx.JoinPath(path, "topology"), "missing; a topology file has a topology section with nodes and links"))
		return nil, probs.Err()
	}
	bpath := yamlx.JoinPath(path, "topology")
	bpairs, err := yamlx.Pairs(file, body, bpath)
	if err != nil {
		probs.Add(err)
		return nil, probs.Err()
	}
	var haveNodes, haveLinks bool
	for _, p := range bpairs {
		field := yamlx.JoinPath(bpath, p.Key)
		switch p.Key {
		case "defaults":
			probs.Add(yamlx.Decode(file, p.Value, field, &f.Topology.Defaults))
		case "nodes":
			haveNodes = true
			nodes, err := yamlx.Pairs(file, p.Value, field)
			if err != nil {
				probs.Add(err)
				continue
			}
			for _, n := range nodes {
				nn := NamedNode{Name: n.Key, Pos: n.Pos}
				if err := yamlx.Decode(file, n.Value, yamlx.JoinPath(field, n.Key), &nn.Spec); err != nil {
					probs.Add(err)
					nn.Bad = true
				}
				f.Topology.Nodes = append(f.Topology.Nodes, nn)
			}
		case "links":
			haveLinks = true
			// Link by link, so that one that fails to decode is known.
			var items []*yaml.Node
			if err := yamlx.Decode(file, p.Value, field, &items); err != nil {
				probs.Add(err)
				continue
			}
			for i, item := range items {
				var ls LinkSpec
				if err := yamlx.Decode(file, item, fmt.Sprintf("%s[%d]", field, i), &ls); err != nil {
					probs.Add(err)
					ls.Bad = true
				}
				f.Topology.Links = append(f.Topology.Links, ls)
			}
		default:
			probs.Add(yamlx.Errorf(p.Pos, field, "unknown field; known fields here: defaults, nodes, links"))
		}
	}
	at := yamlx.NodePos(file, body)
	if !haveNodes {
		probs.Add(yamlx.Errorf(at, yamlx.JoinPath(bpath, "nodes"), "missing; list the hosts and switches"))
	}
	if !haveLinks {
		probs.Add(yamlx.Errorf(at, yamlx.JoinPath(bpath, "links"), "missing; list the links between nodes"))
	}
	f.partial = probs.Len() > 0
	return &f, probs.Err()
}

var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,31}$`)

// Build validates f and returns the topology. Every problem is reported
// (up to problems.Max), each a *yamlx.Error naming the file, line and
// field (file positions are absent for generated topologies that never
// were YAML); a link to a node with a problem of its own is left out, so
// one mistake is reported once.
func (f *File) Build(file string) (*Topology, error) {
	t := &Topology{Name: f.Name, File: file, byName: map[string]*Node{}, byIP: map[netip.Addr]*Node{}}
	if t.Name == "" {
		t.Name = strings.TrimSuffix(baseName(file), ".yaml")
	}
	var probs problems.List
	defs := f.Topology.Defaults
	pos := func(w yamlx.Where) yamlx.Pos {
		if w.File == "" {
			w.File = file
		}
		return w.Pos
	}
	broken := map[string]bool{} // nodes with a problem of their own
	var nhost, nswitch int
	for _, nn := range f.Topology.Nodes {
		s, path := nn.Spec, "topology.nodes."+nn.Name
		w := s.At
		if w.File == "" {
			w.Pos = yamlx.Pos{File: file}
			w.Path = path
		}
		if nn.Bad {
			broken[nn.Name] = true
			continue
		}
		if !nameRE.MatchString(nn.Name) {
			probs.Add(yamlx.Errorf(pos(w), path, "node name %q: want a letter then up to 31 letters, digits, '_', '.' or '-'", nn.Name))
			broken[nn.Name] = true
			continue
		}
		if _, dup := t.byName[nn.Name]; dup || broken[nn.Name] {
			probs.Add(yamlx.Errorf(pos(w), path, "duplicate node name"))
			continue
		}
		n := &Node{Name: nn.Name, Kind: Kind(s.Kind), Index: len(t.Nodes), Labels: s.Labels, Pos: pos(w)}
		bad := func(err error) {
			probs.Add(err)
			broken[nn.Name] = true
		}
		switch n.Kind {
		case Host:
			for _, key := range []string{"aggregators", "queues", "latency"} {
				if set := map[string]bool{"aggregators": s.Aggregators != nil, "queues": s.Queues != nil, "latency": s.Latency != nil}[key]; set {
					bad(w.Errorf(key, "only switches have %s", key))
				}
			}
			n.Queues = 1
			n.MAC = HostMAC(n.Index)
			n.IP = hostIP(nhost)
			nhost++
		case Switch:
			n.Aggregators = pick(s.Aggregators, defs.Switch.Aggregators, DefaultAggregators)
			n.Queues = pick(s.Queues, defs.Switch.Queues, DefaultQueues)
			n.Latency = time.Duration(pick(s.Latency, defs.Switch.Latency, 0))
			if n.Aggregators < 0 || n.Aggregators > MaxAggregators {
				bad(w.Errorf("aggregators", "%d; want the number of aggregator slots, 0 to %d", n.Aggregators, MaxAggregators))
			}
			if n.Queues < 1 || n.Queues > MaxQueues {
				bad(w.Errorf("queues", "%d egress queues; want 1 to %d", n.Queues, MaxQueues))
			}
			n.MAC = PortMAC(n.Index, 0)
			n.IP = switchIP(nswitch)
			nswitch++
		case "":
			bad(w.Errorf("kind", "missing; want kind: host or kind: switch"))
			continue
		default:
			bad(w.Errorf("kind", "%q is not a node kind; want host or switch", truncate(s.Kind)))
			continue
		}
		if s.IP != "" {
			ip, err := netip.ParseAddr(s.IP)
			if err != nil || !ip.Is4() {
				bad(w.Errorf("ip", "%q is not an IPv4 address", truncate(s.IP)))
			} else if why := notUnicast(ip); why != "" {
				bad(w.Errorf("ip", "%s is %s; a node needs a unicast address such as 10.0.0.1", ip, why))
			} else {
				n.IP = ip
			}
		}
		if other, dup := t.byIP[n.IP]; dup {
			bad(w.Errorf("ip", "address %s is already %s's", n.IP, other.Name))
		}
		if broken[n.Name] {
			continue
		}
		t.byName[n.Name] = n
		t.byIP[n.IP] = n
		t.Nodes = append(t.Nodes, n)
	}
	if len(f.Topology.Nodes) == 0 && !f.partial {
		probs.Add(yamlx.Errorf(yamlx.Pos{File: file}, "topology.nodes", "no nodes; a topology needs hosts and switches"))
	}
	ports := make(map[portKey]*Port, 2*len(f.Topology.Links)) // attached ports: a switch may have thousands
	for i, ls := range f.Topology.Links {
		path := fmt.Sprintf("topology.links[%d]", i)
		w := ls.At
		if w.File == "" {
			w.Pos = yamlx.Pos{File: file}
			w.Path = path
		}
		if len(ls.Endpoints) != 2 {
			if ls.Bad {
				continue // a missing or bad endpoints field is reported
			}
			probs.Add(w.Errorf("endpoints", "%d endpoints; a link joins exactly two, e.g. [h1:eth0, s1:eth1]", len(ls.Endpoints)))
			continue
		}
		l := &Link{
			Index:     len(t.Links),
			Rate:      pick(ls.Rate, defs.Link.Rate, DefaultRate),
			Delay:     time.Duration(pick(ls.Delay, defs.Link.Delay, 0)),
			Buffer:    pick(ls.Buffer, defs.Link.Buffer, DefaultBuffer),
			Loss:      float64(pick(ls.Loss, defs.Link.Loss, 0)),
			Duplicate: float64(pick(ls.Duplicate, defs.Link.Duplicate, 0)),
			Reorder:   float64(pick(ls.Reorder, defs.Link.Reorder, 0)),
			Pos:       pos(w),
		}
		ok := true
		if l.Buffer <= 0 {
			probs.Add(w.Errorf("buffer", "must be positive (e.g. 1MiB)"))
			ok = false
		}
		if l.Loss >= 1 {
			// Nothing crosses it: a run that sends packets over it never ends.
			probs.Add(w.Errorf("loss", "%v: the link would lose every frame; want a probability below 1", l.Loss))
			ok = false
		}
		// Check both ends before attaching either.
		var ends [2]*Port
		for j, ep := range ls.Endpoints {
			field := fmt.Sprintf("endpoints[%d]", j)
			name, iface, _ := strings.Cut(ep, ":")
			n := t.byName[name]
			switch {
			case n == nil && broken[name]:
				ok = false // its node's problem is reported
				continue
			case n == nil:
				probs.Add(w.Errorf(field, "unknown node %q (nodes: %s)", name, nodeNames(t, 8)))
				ok = false
				continue
			}
			num := len(n.Ports) + 1
			if j == 1 && ends[0] != nil && ends[0].Node == n {
				num++
			}
			if iface == "" {
				iface = fmt.Sprintf("eth%d", num)
				if n.IsHost() {
					iface = fmt.Sprintf("eth%d", num-1)
				}
			}
			if !ifaceRE.MatchString(iface) {
				probs.Add(w.Errorf(field, "interface name %q: want up to 15 letters, digits, '_', '.' or '-'", iface))
				ok = false
				continue
			}
			if p := ports[portKey{n, iface}]; p != nil {
				probs.Add(w.Errorf(field, "%s:%s is already used by the link at %s", name, iface, p.Link.Pos))
				ok = false
				continue
			}
			ends[j] = &Port{Num: num, Iface: iface, Node: n, Link: l, MAC: PortMAC(n.Index, num)}
			if n.IsHost() {
				ends[j].MAC = n.MAC
			}
		}
		if ends[0] != nil && ends[1] != nil && ends[0].Node == ends[1].Node {
			probs.Add(w.Errorf("endpoints", "both ends are on %s; a link joins two different nodes", ends[0].Node.Name))
			ok = false
		}
		if !ok || ls.Bad {
			continue
		}
		for _, p := range ends {
			p.Node.Ports = append(p.Node.Ports, p)
			ports[portKey{p.Node, p.Iface}] = p
		}
		l.A, l.B = ends[0], ends[1]
		l.A.Peer, l.B.Peer = l.B, l.A
		t.Links = append(t.Links, l)
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	if f.partial {
		// Links and nodes are missing: how hosts attach and whether they
		// connect would be reported wrongly.
		return nil, errPartial
	}
	for _, n := range t.Nodes {
		if n.IsHost() && len(n.Ports) != 1 {
			probs.Add(yamlx.Errorf(n.Pos, "topology.nodes."+n.Name, "host has %d links; tracebed hosts have exactly one (attach it to one switch)", len(n.Ports)))
		}
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	if err := t.checkConnected(); err != nil {
		return nil, err
	}
	return t, nil
}

// portKey names a port by its node and interface.
type portKey struct {
	node  *Node
	iface string
}

var ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

func nodeNames(t *Topology, max int) string {
	var names []string
	for i, n := range t.Nodes {
		if i == max {
			names = append(names, "…")
			break
		}
		names = append(names, n.Name)
	}
	return strings.Join(names, ", ")
}

// checkConnected verifies that every host reaches the first host through switches.
func (t *Topology) checkConnected() error {
	hosts := t.Hosts()
	if len(hosts) == 0 {
		return nil
	}
	dist := t.distances(hosts[0])
	for _, h := range hosts[1:] {
		if dist[h.Index] < 0 {
			return yamlx.Errorf(h.Pos, "topology.nodes."+h.Name, "cannot reach %s: the topology is not connected", hosts[0].Name)
		}
	}
	return nil
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

// pick returns the node's or link's own value, else the defaults section's,
// else tracebed's built-in default.
func pick[T any](v, def *T, builtin T) T {
	switch {
	case v != nil:
		return *v
	case def != nil:
		return *def
	}
	return builtin
}
