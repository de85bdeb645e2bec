/* fwd.p4: tracebed's plain IPv4 forwarding, the P4-16 (v1model) twin of
 * package fwd (fwd.go). Routes are exact /32 destinations; equal-cost
 * routes are action-selector groups hashed on the IPv4 5-tuple; the DSCP
 * class selector (DSCP >> 3) picks the egress queue. fwd.p4info.txtpb is
 * its P4Info (ids assigned by hand; controllers look them up by name).
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
struct headers { ethernet_t ethernet; ipv4_t ipv4; l4_ports_t l4; }
struct metadata { }

parser FwdParser(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
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
    counter(4, CounterType.packets) drops; // 0 malformed, 1 no_route, 2 ttl, 3 local
    action_selector(HashAlgorithm.crc16, 4096, 16) ecmp;

    action drop() { drops.count(1); mark_to_drop(sm); }
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
        actions = { forward; @defaultonly drop; }
        implementation = ecmp;
        const default_action = drop();
        size = 65536;
    }
    apply {
        if (!hdr.ipv4.isValid()) { drops.count(0); mark_to_drop(sm); return; }
        if (hdr.ipv4.ttl <= 1) { drops.count(2); mark_to_drop(sm); return; }
        ipv4_route.apply();
        sm.priority = (bit<3>)(hdr.ipv4.tos >> 5); // DSCP class selector
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
    apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); pkt.emit(hdr.l4); }
}

V1Switch(FwdParser(), FwdVerify(), ingress(), egress(), FwdChecksum(), FwdDeparser()) main;
