"""tracebed's Mininet classes: run a tracebed topology on Mininet.

A script written by 'tracebed topo export --format mininet TOPOLOGY' builds a
Mininet Topo with the topology's addresses, MACs, port numbers and interface
names and calls main() below, which brings it up with these classes:

  TracebedHost   a host configured as 'tracebed topo up' configures one:
                 address/32 on eth0, the attached switch's address on-link,
                 a default route via it and that switch port's MAC as a
                 permanent neighbour (hosts never ARP), IPv6 off, TX checksum
                 offload off, the links' MTU.
  TracebedSwitch a switch namespace (inNamespace=True, so interfaces keep the
                 topology's names) running 'tracebed switch' -- the Go switch,
                 the same pipelines as the simulation -- with P4Runtime on a
                 Unix socket in the run directory.
  BMv2Switch     the same namespace running bmv2's simple_switch_grpc
                 (--no-p4: a controller pushes the program over P4Runtime;
                 'tracebed mininet --switch bmv2' does).
  PortsSwitch    the namespace and its ports only: tracebed starts the
                 switch itself ('tracebed run --network mininet').
  TracebedLink   Mininet's TCLink: HTB shaping of a host's egress at the
                 link's rate (tc has no netem here: delay and loss are the
                 switch's), without TCLink's 1000 Mbit/s cap.

Every node's network namespace is published as /run/netns/tb-RUN-NODE as soon
as its shell exists, and the run is recorded in /run/tracebed/tb-RUN/
(state.json, owner.pid, topology.yaml, switch logs and sockets), as for a run
of 'tracebed topo up': 'tracebed topo cli|exec|pingall|capture|status|down'
work on it, and 'tracebed cleanup' removes what a killed run left.

Control protocol (used by tracebed, which passes --control-fd N, a connected
Unix stream socket): once the network is up the helper writes state.json and
sends one JSON line {"event": "ready", "run_id": ..., "nodes": {NAME: PID}};
it then reads a line: "continue" goes on (the test, the script, Mininet's CLI,
or with --wait until "stop" or the end of the socket), anything else or the
end of the socket tears the network down. When tracebed dies, the socket ends
and the network goes down with it.

This module is tracebed's own (written for it, nothing copied); it needs
Mininet 2.3 (apt-get install mininet) and, for the Go switch, tracebed.
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import partial

from mininet.cli import CLI
from mininet.link import TCIntf, TCLink
from mininet.log import info, error, setLogLevel
from mininet.net import Mininet
from mininet.node import Host, Switch
from mininet.topo import Topo

PREFIX = 'tb-'
NETNS_DIR = '/run/netns'
RUN_DIR = '/run/tracebed'
KEPT_LOG_DIR = '/var/log/tracebed'
BMV2_DEVICE_ID = 1


class Run(object):
    """What every node of one run shares: its id, directory and options."""

    def __init__(self, run_id, args):
        self.id = run_id
        self.dir = os.path.join(RUN_DIR, PREFIX + run_id)
        self.args = args
        self.topology = os.path.join(self.dir, 'topology.yaml')

    def namespace(self, node):
        return PREFIX + self.id + '-' + node


def process_start(pid):
    """The start time of process pid (clock ticks since boot), as tracebed
    records it: with the pid, it tells the process from a later one."""
    with open('/proc/%d/stat' % pid) as f:
        data = f.read()
    return int(data[data.rindex(')') + 2:].split()[19])


def alive(pid, start):
    try:
        with open('/proc/%d/stat' % pid) as f:
            data = f.read()
    except OSError:
        return False
    fields = data[data.rindex(')') + 2:].split()
    return fields[0] not in ('Z', 'X') and int(fields[19]) == start


class TracebedNode(object):
    """Mixin: publish the node's namespace under the run's name as soon as
    its shell (and with it the namespace) exists, so that nothing Mininet
    creates for the run is ever out of tracebed's sight."""

    def __init__(self, name, run=None, **params):
        self.run = run
        super(TracebedNode, self).__init__(name, **params)

    def startShell(self, *args, **kwargs):
        super(TracebedNode, self).startShell(*args, **kwargs)
        ns = self.run.namespace(self.name)
        out = subprocess.run(['ip', 'netns', 'attach', ns, str(self.pid)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if out.returncode != 0:
            raise RuntimeError('ip netns attach %s %d: %s' %
                               (ns, self.pid, out.stdout.decode().strip()))
        self.cmd('sysctl -qw net.ipv6.conf.all.disable_ipv6=1 '
                 'net.ipv6.conf.default.disable_ipv6=1')
        self.cmd('ip link set dev lo up')


class TracebedHost(TracebedNode, Host):
    """A host addressed as 'tracebed topo up' addresses it (see the module
    documentation); params: ip, mac, gateway (the switch's address) and
    gateway_mac (the MAC of the switch port it hangs off)."""

    def configure(self, net):
        self.net = net  # to restore the routes when the link comes back up
        intf = self.defaultIntf()
        a = self.run.args
        self.cmd('ip link set dev %s mtu %d' % (intf, a.mtu))
        # The address as a /32 (Mininet's ifconfig call gives "a/32" no
        # prefix at all), and no route but those below.
        self.cmd('ip addr flush dev %s' % intf)
        self.cmd('ip addr add %s dev %s' % (self.params['ip'], intf))
        self.cmd('ip route flush dev %s' % intf)
        gw, gw_mac = self.params['gateway'], self.params['gateway_mac']
        if a.l2:
            # L2 switches (bmv2 running fwd.p4): every host on-link with
            # its own MAC, the switches' addresses via the uplink.
            self.cmd('ip route replace default dev %s scope link' % intf)
            for o in net.hosts:
                if o is not self:
                    self.cmd('ip neigh replace %s lladdr %s dev %s nud permanent' %
                             (o.params['ip'].split('/')[0], o.params['mac'], intf))
            for s in net.switches:
                self.cmd('ip neigh replace %s lladdr %s dev %s nud permanent' %
                         (s.params['tb_ip'], gw_mac, intf))
            return
        self.cmd('ip route replace %s/32 dev %s scope link' % (gw, intf))
        self.cmd('ip route replace default via %s dev %s' % (gw, intf))
        self.cmd('ip neigh replace %s lladdr %s dev %s nud permanent' % (gw, gw_mac, intf))


class TracebedIntf(TCIntf):
    """TCIntf shaping as 'tracebed topo up' does (emulator/netns's shape and
    HTBClass, which a Go test compares with this): HTB at exactly the
    link's rate, a bucket of a frame but 1 to 8 ms of traffic, a quantum of
    rate/r2q bytes (r2q 10) clamped to the kernel's range,
    and a pfifo of the usual 1000 packets -- and without Mininet's
    1000 Mbit/s cap (above a few Gbit/s the veth, not HTB, sets the pace)."""

    bwParamMax = 10 ** 7

    def ifconfig(self, *args):
        # The kernel flushes a host's routes when its link goes down:
        # Mininet's 'link h1 s1 up' puts them back through here.
        out = TCIntf.ifconfig(self, *args)
        if args == ('up',) and isinstance(self.node, TracebedHost) and getattr(self.node, 'net', None):
            self.node.configure(self.node.net)
        return out

    def bwCmds(self, bw=None, **params):
        if bw is None:
            return [], ' root '
        rate = int(bw * 1e6)
        mtu = getattr(getattr(self.node, 'run', None), 'args', None)
        frame = max(mtu.mtu if mtu else 1500, 1500) + 100
        quantum = min(max(rate // 8 // 10, frame), 200000)
        # A frame, but 1 to 8 ms of traffic (emulator/netns htbBucket says
        # why: late timers at tens of Mbit/s, bursts at a few).
        ms = rate // 8 // 1000
        burst = min(max(ms, min(frame, 8 * ms), 1), 1 << 30)
        return ['%s qdisc add dev %s root handle 1: htb default 1',
                '%%s class add dev %%s parent 1: classid 1:1 htb rate %dbit ceil %dbit '
                'burst %db cburst %db quantum %d' % (rate, rate, burst, burst, quantum),
                '%s qdisc add dev %s parent 1:1 handle 10: pfifo limit 1000'], ' parent 1:1 '


class TracebedLink(TCLink):
    """A link shaped at its host end with HTB (params1={'bw': Mbit/s}),
    with TX and RX checksum offload off on both ends (a user-space switch
    forwards what the kernel hands it)."""

    def __init__(self, node1, node2, shape=True, **params):
        params.update(cls1=TracebedIntf, cls2=TracebedIntf, txo=False, rxo=False)
        if not shape:
            for p in ('params1', 'params2'):
                if p in params:
                    params[p] = dict((k, v) for k, v in params[p].items() if k != 'bw')
        TCLink.__init__(self, node1, node2, **params)


class PortsSwitch(TracebedNode, Switch):
    """A switch namespace holding its ports (up, at the links' MTU) and
    running nothing: tracebed starts the switch in it."""

    controlIntf = None  # in a namespace, a switch has no control interface

    def __init__(self, name, **params):
        params['inNamespace'] = True
        super(PortsSwitch, self).__init__(name, **params)
        self.proc = None
        self.log = os.path.join(self.run.dir, name + '.log')
        self.socket = os.path.join(self.run.dir, name + '.sock')

    def ports_up(self):
        for intf in self.intfList():
            if intf.name != 'lo':
                self.cmd('ip link set dev %s mtu %d up' % (intf, self.run.args.mtu))

    def start(self, controllers):
        self.ports_up()

    def command(self):
        return None

    def launch(self):
        """Start command() in the namespace, its output in the log, and
        wait until it serves P4Runtime on its socket."""
        self.ports_up()
        cmd = self.command()
        if os.path.exists(self.socket):
            os.remove(self.socket)
        with open(self.log, 'w') as log:
            self.proc = self.popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.start_ticks = process_start(self.proc.pid)
        deadline = time.time() + self.run.args.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.socket)
                s.close()
                return
            except OSError:
                time.sleep(0.02)
        with open(self.log) as f:
            log = f.read()
        raise RuntimeError('switch %s did not serve P4Runtime on %s (%s):\n%s' %
                           (self.name, self.socket,
                            'exited' if self.proc.poll() is not None else 'timeout', log))

    def stop_process(self):
        """SIGTERM (the Go switch logs its counters), SIGKILL after 3 s."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def stop(self, deleteIntfs=True):
        self.stop_process()
        super(PortsSwitch, self).stop(deleteIntfs)


class TracebedSwitch(PortsSwitch):
    """The Go switch: 'tracebed switch' in the switch's namespace, with the
    run's program, seed and topology file, P4Runtime on SWITCH.sock."""

    kind = 'go'

    def command(self):
        a = self.run.args
        return [a.tracebed, 'switch', '--topology', self.run.topology, '--name', self.name,
                '--grpc', self.socket, '--program', a.program, '--seed', str(a.seed)]

    def start(self, controllers):
        self.launch()


class BMv2Switch(PortsSwitch):
    """bmv2's simple_switch_grpc in the switch's namespace, with the
    topology's port numbers (as tracebed's emulator/bmv2.SwitchArgs) and no
    program until a controller pushes one over P4Runtime on
    SWITCH.bmv2.sock."""

    kind = 'bmv2'

    def __init__(self, name, **params):
        super(BMv2Switch, self).__init__(name, **params)
        self.log = os.path.join(self.run.dir, name + '.bmv2.log')
        self.socket = os.path.join(self.run.dir, name + '.bmv2.sock')

    def command(self):
        a = self.run.args
        cmd = [a.simple_switch_grpc, '--device-id', str(BMV2_DEVICE_ID)]
        for intf in sorted(self.intfList(), key=lambda i: self.ports[i]):
            if intf.name != 'lo':
                cmd += ['-i', '%d@%s' % (self.ports[intf], intf.name)]
        cmd += ['--log-console', '--log-level', a.bmv2_log_level, '--no-p4',
                '--', '--grpc-server-addr', 'unix:' + self.socket]
        # The programs set an egress priority up to queues-1; with fewer
        # queues bmv2 drops the packet ('Priority out of range').
        queues = int(self.params.get('tb_queues', 1))
        if queues > 1:
            cmd += ['--priority-queues', str(queues)]
        return cmd

    def start(self, controllers):
        self.launch()


SWITCHES = {'tracebed': TracebedSwitch, 'go': TracebedSwitch, 'bmv2': BMv2Switch, 'none': PortsSwitch}


def new_run_id():
    """A random run id as tracebed makes them: a digit and five hex digits."""
    return str(random.randrange(10)) + '%05x' % random.randrange(1 << 20)


def claim(run):
    """Reserve the run id (its directory, created exclusively) unless
    tracebed claimed it already; refuse an id in use."""
    os.makedirs(RUN_DIR, 0o700, exist_ok=True)
    if not run.args.claimed:
        try:
            os.mkdir(run.dir, 0o700)
        except FileExistsError:
            sys.exit('tracebed_mininet: run %s is in use (%s exists): choose another --run-id' % (run.id, run.dir))
        names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
        if any(n.startswith(PREFIX + run.id + '-') for n in names):
            os.rmdir(run.dir)
            sys.exit('tracebed_mininet: run %s is in use (its namespaces exist): choose another --run-id' % run.id)
    with open(os.path.join(run.dir, 'owner.pid'), 'w') as f:
        f.write('%d %d\n' % (os.getpid(), process_start(os.getpid())))


def write_state(run, net, name):
    switches = {}
    kinds = set()
    for s in net.switches:
        if s.proc is not None:
            kinds.add(s.kind)
            switches[s.name] = {'pid': s.proc.pid, 'start': s.start_ticks, 'socket': s.socket,
                                'log': s.log, 'device_id': BMV2_DEVICE_ID}
    state = {'run_id': run.id, 'topology': run.topology, 'name': name, 'network': 'mininet',
             'switch': kinds.pop() if len(kinds) == 1 else '', 'program': run.args.program,
             'switches': switches,
             'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(run.started)),
             'pid': os.getpid(), 'pid_start': process_start(os.getpid())}
    tmp = os.path.join(run.dir, 'state.json.tmp')
    with open(tmp, 'w') as f:
        json.dump(state, f, indent=2)
        f.write('\n')
    os.rename(tmp, os.path.join(run.dir, 'state.json'))


class Watchdog(threading.Thread):
    """Report a switch process that dies while the network is up, and keep
    its log in KEPT_LOG_DIR."""

    def __init__(self, tbrun, switches):
        threading.Thread.__init__(self, daemon=True)
        self.tbrun, self.switches, self.halt = tbrun, switches, threading.Event()

    def run(self):
        reported = set()
        while not self.halt.wait(0.2):
            for s in self.switches:
                if s.proc is None or s.name in reported or s.proc.poll() is None:
                    continue
                reported.add(s.name)
                kept = keep_log(self.tbrun, s)
                error('\n*** tracebed: switch %s (pid %d) has died (exit status %s): the hosts '
                      'behind it have lost connectivity; its log is kept: %s\n' %
                      (s.name, s.proc.pid, s.proc.returncode, kept or s.log))


def keep_log(run, s):
    try:
        os.makedirs(KEPT_LOG_DIR, 0o755, exist_ok=True)
        path = os.path.join(KEPT_LOG_DIR, '%s%s-%s.log' % (PREFIX, run.id, s.name))
        shutil.copyfile(s.log, path)
        return path
    except OSError:
        return None


def teardown(run, net):
    """Stop the switches (their counters first), Mininet's network, the
    published namespaces and the run directory: nothing is left."""
    if net is not None:
        for s in net.switches:
            if isinstance(s, PortsSwitch):
                if s.proc is not None and s.proc.poll() is not None:
                    keep_log(run, s)
                s.stop_process()
                try:
                    with open(s.log) as f:
                        for line in f:
                            if line.startswith('port ') and 'rx 0 frames, tx 0,' not in line:
                                info('%s %s' % (s.name, line))
                except OSError:
                    pass
        net.stop()
    if os.path.isdir(NETNS_DIR):
        for name in os.listdir(NETNS_DIR):
            if name.startswith(PREFIX + run.id + '-'):
                subprocess.run(['ip', 'netns', 'delete', name], stderr=subprocess.DEVNULL)
    shutil.rmtree(run.dir, ignore_errors=True)


def parse_args(argv, name):
    p = argparse.ArgumentParser(description='Bring the tracebed topology %s up on Mininet.' % name)
    p.add_argument('--run-id', default='', help='name the run (1-6 lowercase letters or digits; default random)')
    p.add_argument('--switch', default='tracebed', choices=sorted(SWITCHES),
                   help="tracebed (the Go switch, default), bmv2 (simple_switch_grpc) or none (ports only)")
    p.add_argument('--program', default='fwd', help='data plane the Go switches run (fwd, ina, farmem)')
    p.add_argument('--seed', type=int, default=1, help="seed of the switches' injected loss")
    p.add_argument('--mtu', type=int, default=1500, help='MTU of every link (576-9000)')
    p.add_argument('--no-shaping', action='store_true', help='do not shape host links with HTB')
    p.add_argument('--l2', action='store_true', help='address hosts for L2 switches (default with bmv2)')
    p.add_argument('--test', default='', choices=['', 'pingall', 'none'],
                   help='run a test instead of the CLI (pingall exits 1 on a lost ping)')
    p.add_argument('--script', default='', help="run Mininet CLI commands from this file instead of the CLI")
    p.add_argument('--wait', action='store_true', help='no CLI: wait for SIGTERM (or, under tracebed, "stop")')
    p.add_argument('--tracebed', default=os.environ.get('TRACEBED', shutil.which('tracebed') or 'tracebed'),
                   help='the tracebed executable')
    p.add_argument('--simple-switch-grpc', dest='simple_switch_grpc',
                   default=shutil.which('simple_switch_grpc') or 'simple_switch_grpc')
    p.add_argument('--bmv2-log-level', default='warn')
    p.add_argument('--start-timeout', type=float, default=20)
    p.add_argument('--control-fd', type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument('--claimed', action='store_true', help=argparse.SUPPRESS)
    p.add_argument('--verbosity', default='info', help="Mininet's log level")
    a = p.parse_args(argv)
    if a.switch == 'bmv2':
        a.l2 = True
    if not 576 <= a.mtu <= 9000:
        p.error('--mtu %d: want 576 to 9000' % a.mtu)
    return a


class Terminated(Exception):
    """SIGTERM or SIGHUP: tear down and leave."""


def _terminate(signum, frame):
    # The first signal starts the teardown; later ones (a parent-death
    # signal after tracebed's own SIGTERM, a second Ctrl-C) must not
    # interrupt it, so they are ignored from here on.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signal.Signals(signum).name)


def main(topo_class, topology_yaml, argv=None):
    """Bring the topology up with Mininet, then hand over to the test, the
    script, Mininet's CLI or tracebed; tear everything down on the way out
    (also on SIGTERM, SIGHUP and Ctrl-C)."""
    name = topo_class.NAME
    args = parse_args(sys.argv[1:] if argv is None else argv, name)
    setLogLevel(args.verbosity)
    if os.geteuid() != 0:
        sys.exit('tracebed_mininet: Mininet needs root')
    if args.switch == 'bmv2' and not shutil.which(args.simple_switch_grpc):
        sys.exit('tracebed_mininet: %s is not installed (bmv2: see tracebed docs/bmv2.md)' % args.simple_switch_grpc)
    if args.switch in ('tracebed', 'go') and not shutil.which(args.tracebed) and not os.path.exists(args.tracebed):
        sys.exit('tracebed_mininet: %s not found: pass --tracebed PATH or put tracebed on PATH' % args.tracebed)
    run = Run(args.run_id or new_run_id(), args)
    ctl = socket.socket(fileno=args.control_fd) if args.control_fd >= 0 else None
    claim(run)
    run.started = time.time()
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    net, code, watchdog = None, 0, None
    try:
        with open(run.topology, 'w') as f:
            f.write(topology_yaml)
        net = Mininet(topo=topo_class(), host=partial(TracebedHost, run=run),
                      switch=partial(SWITCHES[args.switch], run=run),
                      link=partial(TracebedLink, shape=not args.no_shaping),
                      controller=None, build=False)
        net.build()
        for h in net.hosts:
            h.configure(net)
        net.start()
        write_state(run, net, name)
        watchdog = Watchdog(run, [s for s in net.switches if s.proc is not None])
        watchdog.start()
        if ctl is not None:
            nodes = dict((n.name, n.pid) for n in net.hosts + net.switches)
            ctl.sendall((json.dumps({'event': 'ready', 'run_id': run.id, 'nodes': nodes}) + '\n').encode())
            if _readline(ctl) != 'continue':
                return
        info('*** tracebed run %s is up: tracebed topo cli|exec|pingall|capture --run %s work on it\n' %
             (run.id, run.id))
        if args.test == 'pingall':
            if net.pingAll() > 0:
                code = 1
        elif args.test == 'none':
            pass
        elif args.script:
            CLI(net, script=args.script)
        elif args.wait:
            if ctl is not None:
                while _readline(ctl) not in ('stop', ''):
                    pass
            else:
                while True:
                    signal.pause()
        else:
            CLI(net)
    except (Terminated, KeyboardInterrupt) as e:
        error('*** tracebed_mininet: %s: tearing down\n' % (e or 'interrupted'))
        code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # finish the teardown
        if watchdog is not None and watchdog.ident is not None:  # a signal may come between its creation and start
            watchdog.halt.set()
            watchdog.join()
        teardown(run, net)
        if ctl is not None:
            try:
                ctl.sendall(b'{"event": "down"}\n')
            except OSError:
                pass
    sys.exit(code)


def _readline(sock):
    """One line from the control socket ('' at its end)."""
    buf = b''
    while not buf.endswith(b'\n'):
        b = sock.recv(1)
        if not b:
            break
        buf += b
    return buf.decode().strip()


__all__ = ['Topo', 'TracebedHost', 'TracebedSwitch', 'BMv2Switch', 'PortsSwitch', 'TracebedLink', 'main']
