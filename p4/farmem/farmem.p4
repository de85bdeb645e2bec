/* farmem.p4: tracebed's far-memory data plane, the P4-16 (v1model) twin of
 * package farmem (pipeline.go). IPv4 forwarding is fwd.p4's (exact /32
 * routes, ECMP action selector, DSCP class selector → egress queue). On top
 * of it, packets to or from UDP port 7470 that carry a valid far-memory
 * header are counted by (type, urgency) and looked up in farmem_classify;
 * a hit sets the egress priority (bmv2: simple_switch --priority-queues 8)
 * and re-marks the DSCP to that class selector, so the class is visible on
 * the wire and kept by DSCP-only switches. A miss leaves the DSCP priority.
 *
 * farmem.p4info.txtpb is its P4Info, as p4c-bm2-ss writes it (the Go twin
 * serves the same ids; controllers look ids up by name). The Go twin
 * passes testdata/vectors.json; TestVectorsBMv2 runs the same vectors
 * through simple_switch_grpc where p4c and bmv2 are installed.
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> FARMEM_PORT = 7470;
const bit<16> FARMEM_MAGIC = 0x464d;

header ethernet_t { bit<48> dst_addr; bit<48> src_addr; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len;
    bit<16> identification; bit<3> flags; bit<13> frag_offset;
    bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src_addr; bit<32> dst_addr;
}
header l4_ports_t { bit<16> src_port; bit<16> dst_port; }
header udp_rest_t { bit<16> length; bit<16> checksum; }

/* fwd.p4's controller headers and CPU port. */
const bit<9> CPU_PORT = 510;
@controller_header("packet_in")
header packet_in_t { bit<16> ingress_port; }
@controller_header("packet_out")
header packet_out_t { bit<16> egress_port; }
/* The far-memory header (p4/farmem/header.go; docs/farmem.md). */
header farmem_t {
    bit<16> magic;
    bit<4>  version;
    bit<4>  msg_type;     /* 1 read, 2 data, 3 write, 4 ack */
    bit<1>  retransmit;
    bit<1>  not_found;
    bit<3>  reserved;
    bit<3>  urgency;      /* 0 none … 7 the sender is blocked */
    bit<32> id;
    bit<64> page;
    bit<32> page_version;
    bit<32> sum;
}
struct headers {
    packet_in_t packet_in; packet_out_t packet_out;
    ethernet_t ethernet; ipv4_t ipv4; l4_ports_t l4; udp_rest_t udp; farmem_t farmem;
}
/* miss_reason: index of drops for route_miss's drop (0 malformed, 1 no_route);
 * zero: never written, the target of the UDP checksum verification. */
struct metadata { bit<32> miss_reason; bit<16> zero; }

parser FarmemParser(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) { CPU_PORT: parse_packet_out; default: parse_ethernet; }
    }
    state parse_packet_out { pkt.extract(hdr.packet_out); transition parse_ethernet; }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) { 0x0800: parse_ipv4; default: accept; }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4 && hdr.ipv4.ihl == 5, error.HeaderTooShort);
        transition select(hdr.ipv4.protocol) { 6: parse_l4; 17: parse_udp; default: accept; }
    }
    state parse_l4 { pkt.extract(hdr.l4); transition accept; }
    state parse_udp {
        pkt.extract(hdr.l4);
        pkt.extract(hdr.udp);
        transition select(hdr.l4.dst_port, hdr.l4.src_port) {
            (FARMEM_PORT, _): parse_farmem;
            (_, FARMEM_PORT): parse_farmem;
            default: accept;
        }
    }
    state parse_farmem { pkt.extract(hdr.farmem); transition accept; }
}

/* Far-memory messages must carry a correct UDP checksum (docs/farmem.md,
 * "Integrity"). The sum includes the checksum field itself, so a correct
 * datagram sums to zero whether its checksum is ~sum or RFC 768's 0xFFFF
 * for a computed zero; the target is meta.zero, never written. A zero
 * (absent) checksum is refused in ingress. The page data is the payload. */
control FarmemVerify(inout headers hdr, inout metadata meta) {
    apply {
        bool on_port = hdr.udp.isValid() &&
            (hdr.l4.dst_port == FARMEM_PORT || hdr.l4.src_port == FARMEM_PORT);
        verify_checksum_with_payload(on_port && hdr.farmem.isValid(),
            { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, 8w0, hdr.ipv4.protocol, hdr.udp.length,
              hdr.l4.src_port, hdr.l4.dst_port, hdr.udp.length, hdr.udp.checksum,
              hdr.farmem.magic, hdr.farmem.version, hdr.farmem.msg_type, hdr.farmem.retransmit,
              hdr.farmem.not_found, hdr.farmem.reserved, hdr.farmem.urgency, hdr.farmem.id,
              hdr.farmem.page, hdr.farmem.page_version, hdr.farmem.sum },
            meta.zero, HashAlgorithm.csum16);
        verify_checksum_with_payload(on_port && !hdr.farmem.isValid(),
            { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, 8w0, hdr.ipv4.protocol, hdr.udp.length,
              hdr.l4.src_port, hdr.l4.dst_port, hdr.udp.length, hdr.udp.checksum },
            meta.zero, HashAlgorithm.csum16);
    }
}

control ingress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    /* fwd.p4's forwarding, unchanged. */
    counter(1, CounterType.packets) forwarded;
    counter(8, CounterType.packets) drops; // 0 malformed, 1 no_route, 2 ttl, 3 local, 4 checksum
    action_selector(HashAlgorithm.crc16, 4096, 16) ecmp;

    action drop() { drops.count(meta.miss_reason); mark_to_drop(sm); }
    action send_to_cpu() {
        forwarded.count(0); // to the controller
        sm.egress_spec = CPU_PORT;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = (bit<16>) sm.ingress_port;
    }
    action forward(bit<9> port) {
        sm.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
        forwarded.count(0);
    }
    table ipv4_route {
        key = {
            hdr.ipv4.dst_addr: exact;
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.dst_addr: selector;
            hdr.ipv4.protocol: selector;
            hdr.l4.src_port: selector;
            hdr.l4.dst_port: selector;
        }
        actions = { forward; send_to_cpu; @defaultonly NoAction; }
        implementation = ecmp;
        /* No default_action: see fwd.p4 (a miss is route_miss's). */
        size = 65536;
    }
    table route_miss {
        actions = { drop; send_to_cpu; }
        default_action = drop();
        size = 1;
    }

    /* Far-memory classification. */
    counter(40, CounterType.packets_and_bytes) farmem_class; // index type << 3 | urgency
    counter(4, CounterType.packets) farmem_stats; // 0 classified, 1 default, 2 malformed

    action set_priority(bit<3> prio) {
        sm.priority = prio;
        hdr.ipv4.tos = prio ++ 3w0 ++ hdr.ipv4.tos[1:0];
    }
    table farmem_classify {
        key = {
            hdr.farmem.msg_type: exact @name("type");
            hdr.farmem.urgency: exact @name("urgency");
        }
        actions = { set_priority; NoAction; }
        default_action = NoAction();
        size = 64;
    }

    apply {
        if (hdr.packet_out.isValid()) {
            if (hdr.packet_out.egress_port == (bit<16>) CPU_PORT) {
                drops.count(0); // back to the controller: malformed
                mark_to_drop(sm);
                return;
            }
            forwarded.count(0);
            sm.egress_spec = (bit<9>) hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            return;
        }
        /* A well-formed IPv4 header (fwd.p4's rule: version 4 and 20
         * bytes, a total length within the frame); anything else is
         * malformed, route_miss's. */
        bool ipv4 = hdr.ipv4.isValid() && sm.parser_error != error.HeaderTooShort &&
            hdr.ipv4.total_len >= 20 && (bit<32>) hdr.ipv4.total_len + 14 <= sm.packet_length;
        bool on_port = ipv4 && hdr.udp.isValid() &&
            (hdr.l4.dst_port == FARMEM_PORT || hdr.l4.src_port == FARMEM_PORT);
        bool miss = !ipv4;
        meta.miss_reason = 0; // not IPv4: malformed
        if (ipv4) {
            if (hdr.ipv4.ttl <= 1) { drops.count(2); mark_to_drop(sm); return; }
            if (on_port && (sm.checksum_error == 1 || hdr.udp.checksum == 0)) {
                drops.count(4); // checksum: a corrupted message is never forwarded
                mark_to_drop(sm);
                return;
            }
            if (ipv4_route.apply().hit) {
                sm.priority = (bit<3>)(hdr.ipv4.tos >> 5); // DSCP class selector
            } else {
                meta.miss_reason = 1; // no_route
                miss = true;
            }
        }
        /* One place for route_miss: bmv2 applies a table at one place. */
        if (miss) {
            route_miss.apply();
        }

        if (on_port) {
            bool ok = hdr.farmem.isValid() && hdr.farmem.magic == FARMEM_MAGIC &&
                hdr.farmem.version == 1 && hdr.farmem.reserved == 0 &&
                hdr.farmem.msg_type >= 1 && hdr.farmem.msg_type <= 4 &&
                hdr.udp.length >= 32;
            bit<16> n = hdr.udp.length - 32; // data bytes after the header
            if (ok) {
                if (hdr.farmem.not_found == 1 && hdr.farmem.msg_type != 2) {
                    ok = false;
                } else if (hdr.farmem.msg_type == 1 || hdr.farmem.msg_type == 4 || hdr.farmem.not_found == 1) {
                    ok = n == 0;
                } else {
                    ok = n >= 512 && n <= 32768 && (n & (n - 1)) == 0;
                }
            }
            if (!ok) {
                farmem_stats.count(2);
            } else {
                farmem_class.count((bit<32>)(hdr.farmem.msg_type ++ hdr.farmem.urgency));
                if (farmem_classify.apply().hit) {
                    farmem_stats.count(0);
                } else {
                    farmem_stats.count(1);
                }
            }
        }
    }
}

control egress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    // The Go twin rewrites the Ethernet addresses from the topology
    // (port MAC → peer MAC); here a table keyed by egress port would.
    apply { }
}

control FarmemChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control FarmemDeparser(packet_out pkt, in headers hdr) {
    apply {
        pkt.emit(hdr.packet_in); pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.l4);
        pkt.emit(hdr.udp); pkt.emit(hdr.farmem);
    }
}

@pkginfo(name="farmem", version="1")
@brief("fwd.p4's IPv4 forwarding, with far-memory messages (UDP port 7470) classified by (type, urgency) into egress priority classes, re-marked in the DSCP")
V1Switch(FarmemParser(), FarmemVerify(), ingress(), egress(), FarmemChecksum(), FarmemDeparser()) main;
