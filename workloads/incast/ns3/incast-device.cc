// incast-device: tracebed's incast (workloads/incast) as an ns-3 program at
// the device level, the peer BenchmarkNS3Incast measures tracebed's sim
// against. N senders send frames of SIZE bytes at line rate, one every
// serialization time, through one switch to one receiver; the switch's
// egress queue towards the receiver holds BUFFER bytes (drop-tail, the frame
// on the wire not counted), as in tracebed's sim.
//
// Like tracebed's sim it models links and queues only: frames go device to
// device (PointToPointNetDevice; the 2-byte PPP header is part of SIZE), the
// switch forwards every frame from its protocol handler to the receiver's
// port, and no IP, UDP or traffic-control layer runs. It prints one line of
// key=value pairs: the frames delivered and dropped (which must match
// tracebed's closed form), the arrival time of the last frame, and the
// events ns-3 executed.
//
// Build: g++ -O2 -o incast-device incast-device.cc \
//          $(pkg-config --cflags --libs ns3-point-to-point ns3-network ns3-core)
// Run:   ./incast-device SENDERS PACKETS SIZE RATE_BPS DELAY_NS BUFFER_BYTES

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

using namespace ns3;

namespace {

uint64_t delivered = 0;
uint64_t dropped = 0;
Time last;

// Switch forwards every frame that arrives on a sender's port to the
// receiver's port.
struct Switch {
  Ptr<NetDevice> out;
  Address to;
  void Forward(Ptr<NetDevice>, Ptr<const Packet> p, uint16_t proto,
               const Address&, const Address&, NetDevice::PacketType) {
    out->Send(p->Copy(), to, proto);
  }
};

void Receive(Ptr<NetDevice>, Ptr<const Packet>, uint16_t, const Address&,
             const Address&, NetDevice::PacketType) {
  delivered++;
  last = Simulator::Now();
}

void Drop(Ptr<const Packet>) { dropped++; }

// Sender sends n frames of size bytes (PPP header included) to its switch
// port, one every gap.
struct Sender {
  Ptr<NetDevice> dev;
  Address to;
  uint32_t size;
  uint64_t n;
  Time gap;
  uint64_t sent = 0;
  void Send() {
    dev->Send(Create<Packet>(size - 2), to, 0x0800);
    if (++sent < n) {
      Simulator::Schedule(gap, &Sender::Send, this);
    }
  }
};

}  // namespace

int main(int argc, char* argv[]) {
  if (argc != 7) {
    std::fprintf(stderr,
                 "usage: %s SENDERS PACKETS SIZE RATE_BPS DELAY_NS BUFFER_BYTES\n",
                 argv[0]);
    return 2;
  }
  const uint32_t senders = std::strtoul(argv[1], nullptr, 10);
  const uint64_t packets = std::strtoull(argv[2], nullptr, 10);
  const uint32_t size = std::strtoul(argv[3], nullptr, 10);
  const uint64_t rate = std::strtoull(argv[4], nullptr, 10);
  const uint64_t delayNs = std::strtoull(argv[5], nullptr, 10);
  const uint64_t buffer = std::strtoull(argv[6], nullptr, 10);
  if (senders < 1 || packets < 1 || size < 64 || rate < 1 || buffer < 1) {
    std::fprintf(stderr, "incast-device: bad arguments\n");
    return 2;
  }
  Time::SetResolution(Time::PS);

  NodeContainer hosts;
  hosts.Create(senders + 1);  // the last one receives
  Ptr<Node> sw = CreateObject<Node>();

  PointToPointHelper p2p;
  p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rate)));
  p2p.SetDeviceAttribute("Mtu", UintegerValue(9000));
  p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs)));

  std::vector<Sender> tx(senders);
  std::vector<Ptr<NetDevice>> ingress;
  for (uint32_t i = 0; i < senders; i++) {
    // Host queues never fill: each host sends one frame per serialization time.
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                 QueueSizeValue(QueueSize("1000000p")));
    NetDeviceContainer d = p2p.Install(hosts.Get(i), sw);
    tx[i].dev = d.Get(0);
    tx[i].to = d.Get(1)->GetAddress();
    ingress.push_back(d.Get(1));
  }
  p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
               QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, buffer)));
  NetDeviceContainer out = p2p.Install(sw, hosts.Get(senders));

  Switch s{out.Get(0), out.Get(1)->GetAddress()};
  for (auto& d : ingress) {
    sw->RegisterProtocolHandler(MakeCallback(&Switch::Forward, &s), 0, d, false);
  }
  hosts.Get(senders)->RegisterProtocolHandler(MakeCallback(&Receive), 0, out.Get(1), false);
  Ptr<PointToPointNetDevice> egress = DynamicCast<PointToPointNetDevice>(out.Get(0));
  egress->GetQueue()->TraceConnectWithoutContext("Drop", MakeCallback(&Drop));

  // One frame every serialization time, rounded up to a nanosecond as
  // tracebed's senders do.
  const uint64_t txPs = (uint64_t(size) * 8 * 1000000000000ULL + rate - 1) / rate;
  const Time gap = NanoSeconds((txPs + 999) / 1000);
  for (uint32_t i = 0; i < senders; i++) {
    tx[i].size = size;
    tx[i].n = packets;
    tx[i].gap = gap;
    Simulator::ScheduleWithContext(hosts.Get(i)->GetId(), Seconds(0), &Sender::Send, &tx[i]);
  }
  Simulator::Run();
  const uint64_t events = Simulator::GetEventCount();
  Simulator::Destroy();
  std::printf("delivered=%llu dropped=%llu completion_ps=%lld events=%llu\n",
              (unsigned long long)delivered, (unsigned long long)dropped,
              (long long)last.GetPicoSeconds(), (unsigned long long)events);
  return 0;
}
