/* fwd.p4: tracebed's plain IPv4 forwarding, the P4-16 (v1model) twin of
 * package fwd (fwd.go). Routes are exact /32 destinations; equal-cost
 * routes are action-selector groups hashed on the IPv4 5-tuple; the DSCP
 * class selector (DSCP >> 3) picks the egress queue. fwd.p4info.txtpb is
 * its P4Info as p4c-bm2-ss writes it (the Go twin serves the same ids;
 * controllers look them up by name).
 *
 * Packet I/O with the controller (P4Runtime packet-in/packet-out): a frame
 * from the CPU port starts with the packet_out header and leaves, as it
 * is, out of the port it names; send_to_cpu (a route's action, or the
 * default action of route_miss, which runs when no route matches) sends
 * the frame to the CPU port behind a packet_in header naming the port it
 * came in on. simple_switch_grpc runs with --cpu-port 510.
 */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst_addr; bit<48> src_addr; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> total_len;
    bit<16> identification; bit<3> flags; bit<13> frag_offset;
    bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src_addr; bit<32> dst_addr;
}
header l4_ports_t { bit<16> src_port; bit<16> dst_port; }

const bit<9> CPU_PORT = 510;

/* The controller headers. bit<16> ports keep them byte-aligned without
 * padding fields a client would have to fill. */
@controller_header("packet_in")
header packet_in_t { bit<16> ingress_port; }
@controller_header("packet_out")
header packet_out_t { bit<16> egress_port; }

struct headers { packet_in_t packet_in; packet_out_t packet_out; ethernet_t ethernet; ipv4_t ipv4; l4_ports_t l4; }
struct metadata { bit<32> miss_reason; } /* index of drops for route_miss's drop: 0 malformed, 1 no_route */

parser FwdParser(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
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
        transition select(hdr.ipv4.protocol) { 6: parse_l4; 17: parse_l4; default: accept; }
    }
    state parse_l4 { pkt.extract(hdr.l4); transition accept; }
}

control FwdVerify(inout headers hdr, inout metadata meta) { apply { } }

control ingress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(1, CounterType.packets) forwarded;
    counter(8, CounterType.packets) drops; // 0 malformed, 1 no_route, 2 ttl, 3 local, 4 checksum
    action_selector(HashAlgorithm.crc16, 4096, 16) ecmp;

    /* A frame nothing forwards: counted as malformed (not IPv4) or
     * no_route. */
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
        /* No default_action: bmv2 runs none on a table whose actions come
         * from an action profile (p4c-bm2-ss warns and leaves it out), so
         * a miss — NoAction, P4Runtime's only default of an indirect
         * table (§9.1.3) — is route_miss's to handle, on both twins. */
        size = 65536;
    }
    /* What a frame without a route (or not IPv4 at all, such as ARP)
     * meets: drop, or, when a controller makes send_to_cpu the default,
     * a packet-in. */
    table route_miss {
        actions = { drop; send_to_cpu; }
        default_action = drop();
        size = 1;
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
        meta.miss_reason = 0; // not IPv4: malformed
        /* A well-formed IPv4 header, as the Go twin's frame.IsIPv4 has it:
         * version 4 and 20 bytes (the parser's verify, which leaves the
         * header valid when it fails), a total length within the frame. */
        if (hdr.ipv4.isValid() && sm.parser_error != error.HeaderTooShort &&
            hdr.ipv4.total_len >= 20 && (bit<32>) hdr.ipv4.total_len + 14 <= sm.packet_length) {
            if (hdr.ipv4.ttl <= 1) { drops.count(2); mark_to_drop(sm); return; }
            if (ipv4_route.apply().hit) {
                sm.priority = (bit<3>)(hdr.ipv4.tos >> 5); // DSCP class selector
                return;
            }
            meta.miss_reason = 1; // no_route
        }
        route_miss.apply();
    }
}

control egress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    // The Go twin rewrites the Ethernet addresses from the topology
    // (port MAC → peer MAC); here a table keyed by egress port would.
    apply { }
}

control FwdChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.tos, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control FwdDeparser(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr.packet_in); pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.l4); }
}

@pkginfo(name="fwd", version="1")
@brief("IPv4 forwarding by exact destination address, ECMP over an action selector, DSCP class selector to egress queue; packet-in on a miss or by action, packet-out through the CPU port")
V1Switch(FwdParser(), FwdVerify(), ingress(), egress(), FwdChecksum(), FwdDeparser()) main;
