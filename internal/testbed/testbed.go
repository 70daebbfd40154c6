// Package testbed builds the gen -> dut -> sink topology that the end-to-end tests, the
// differential tests and the benchmarks share, in network namespaces of their own:
//
//	gen eth0 198.18.0.2/24  <->  in0 198.18.0.1/24  [dut]  out0 198.18.1.1/24  <->  sink eth0 198.18.1.2/24
//	         2001:2::2/64             2001:2::1/64             2001:2:0:1::1/64           2001:2:0:1::2/64
//
// The DUT routes Prefixes prefixes (198.19.N.0/24 and 2001:2:0:f1NN::/64, N in hex) to the sink, configured
// with iproute2 as a person would, and forwards with net.ipv4.ip_forward=1 and IPv6 forwarding.
// NewBridge builds the same namespaces with a bridge in the DUT instead (see bridge.go).
package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
)

// Options shape the topology.
type Options struct {
	// Prefixes routed by the DUT to the sink (default 50, as in the paper).
	Prefixes int
	// Queues per veth (default 1); more lets several generator CPUs run in parallel.
	Queues int
	// NoGRO leaves GRO off on every veth. By default it is on: a veth must have NAPI (GRO or an
	// XDP program) to receive XDP-redirected frames (see KERNEL-NOTES).
	NoGRO bool
	// TxChecksumOff turns transmit checksum offload off on gen's and sink's eth0, so their
	// stacks put complete checksums in every packet, as hosts behind physical NICs do. By default
	// it stays on (veth's default, as in containers): the DUT then receives CHECKSUM_PARTIAL skbs.
	TxChecksumOff bool
	// NoRouterSolicit: gen and the sink send no IPv6 router solicitations. By default each sends
	// its first one a second or two after coming up, and the DUT (a router) then holds the
	// host's link-local address STALE: a neighbour nobody talks to, made when the test runs.
	NoRouterSolicit bool
}

// Testbed is the three namespaces and what is known of them.
type Testbed struct {
	Gen, DUT, Sink *nsutil.NS

	GenMAC, InMAC, OutMAC, SinkMAC net.HardwareAddr
	GenIfindex, SinkIfindex        int
	InIfindex, OutIfindex          int
	Prefixes                       int
	// GenIP and SinkIP are the IPv4 addresses of gen's and the sink's eth0 (GenAddr and
	// SinkAddr in the routed topology, BridgeSinkAddr for the sink in the bridged one).
	GenIP, SinkIP netip.Addr
	// Bridge is the DUT's bridge in the bridged topology (NewBridge), "" in the routed one.
	Bridge string

	pings []ping // what ResolveNeighbours does
}

// Fixed addresses of the topology.
var (
	GenAddr   = netip.MustParseAddr("198.18.0.2")
	InAddr    = netip.MustParseAddr("198.18.0.1")
	OutAddr   = netip.MustParseAddr("198.18.1.1")
	SinkAddr  = netip.MustParseAddr("198.18.1.2")
	GenAddr6  = netip.MustParseAddr("2001:2::2")
	InAddr6   = netip.MustParseAddr("2001:2::1")
	OutAddr6  = netip.MustParseAddr("2001:2:0:1::1")
	SinkAddr6 = netip.MustParseAddr("2001:2:0:1::2")
)

// Prefix4 is the i-th routed IPv4 prefix's host h (198.19.i.h).
func Prefix4(i, h int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(i), byte(h)}) }

// Prefix6 is the i-th routed IPv6 prefix's host h (2001:2:0:f1ii::h, i < 256): inside
// 2001:2::/48, the benchmarking range test hosts take their addresses from.
func Prefix6(i, h int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 0xf1, byte(i), 14: byte(h >> 8), 15: byte(h)})
}

// New builds the topology. Names start with prefix (use "lfp-..."); Close removes everything.
func New(prefix string, o Options) (*Testbed, error) {
	if o.Prefixes == 0 {
		o.Prefixes = 50
	}
	// IPv4 lines apart from IPv6 ones, so that each family's run of ip commands is one batch.
	var routes4, routes6 strings.Builder
	for i := 0; i < o.Prefixes; i++ {
		fmt.Fprintf(&routes4, "ip route add 198.19.%d.0/24 via 198.18.1.2\n", i)
		fmt.Fprintf(&routes6, "ip -6 route add 2001:2:0:f1%02x::/64 via 2001:2:0:1::2\n", i)
	}
	return build(prefix, o, layout{
		gen:   host{addr4: "198.18.0.2/24", addr6: "2001:2::2/64", gw4: "198.18.0.1", gw6: "2001:2::1"},
		sink:  host{addr4: "198.18.1.2/24", addr6: "2001:2:0:1::2/64", gw4: "198.18.1.1", gw6: "2001:2:0:1::1"},
		genIP: GenAddr, sinkIP: SinkAddr,
		dut: func(gro string) string {
			return `
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1
ip addr add 198.18.0.1/24 dev in0
ip addr add 198.18.1.1/24 dev out0
ip link set in0 up
ip link set out0 up
` + routes4.String() + `
ip -6 addr add 2001:2::1/64 dev in0 nodad
ip -6 addr add 2001:2:0:1::1/64 dev out0 nodad
` + routes6.String() + `
ethtool -K in0 gro ` + gro + `
ethtool -K out0 gro ` + gro + "\n"
		},
		// The DUT resolves gen and sink, and each host its gateway, the ordinary way.
		pings: func(tb *Testbed) []ping {
			return []ping{
				{tb.DUT, []string{"198.18.0.2", "198.18.1.2", "2001:2::2", "2001:2:0:1::2"}},
				{tb.Gen, []string{"198.18.0.1", "2001:2::1"}},
				{tb.Sink, []string{"198.18.1.1", "2001:2:0:1::1"}},
			}
		},
	})
}

// layout is what differs between the topologies built on the same three namespaces and two
// veth pairs (gen eth0 <-> DUT in0, DUT out0 <-> sink eth0).
type layout struct {
	gen, sink     host
	genIP, sinkIP netip.Addr
	bridge        string
	// dut is the DUT's configuration script, given the GRO setting for in0 and out0.
	dut   func(gro string) string
	pings func(*Testbed) []ping
}

// host is an end host's eth0: addresses with their prefix length, default gateways ("": none).
type host struct {
	addr4, addr6 string
	gw4, gw6     string
	// noRouterSolicit: no IPv6 router solicitations (by default a host sends them forever, with
	// a growing interval).
	noRouterSolicit bool
}

// script configures eth0 (IPv4 lines apart from IPv6 ones, each run of them one ip batch), with
// the offloads given to ethtool -K (gro and, if asked, tx).
func (h host) script(offloads string) string {
	s := ""
	if h.noRouterSolicit {
		s += "sysctl -qw net.ipv6.conf.eth0.router_solicitations=0\n"
	}
	s += "ip addr add " + h.addr4 + " dev eth0\n" +
		"ip link set eth0 up\n"
	if h.gw4 != "" {
		s += "ip route add default via " + h.gw4 + "\n"
	}
	s += "ip -6 addr add " + h.addr6 + " dev eth0 nodad\n"
	if h.gw6 != "" {
		s += "ip -6 route add default via " + h.gw6 + "\n"
	}
	return s + "ethtool -K eth0 " + offloads + "\n"
}

// ping is one namespace pinging addresses once each.
type ping struct {
	from *nsutil.NS
	to   []string
}

// build creates the namespaces and veths and configures them as l says.
func build(prefix string, o Options, l layout) (tb *Testbed, err error) {
	if o.Queues == 0 {
		o.Queues = 1
	}
	tb = &Testbed{Prefixes: o.Prefixes, GenIP: l.genIP, SinkIP: l.sinkIP, Bridge: l.bridge}
	// The namespaces made so far are removed on failure: through a copy of the pointer, since
	// each failing return sets tb to nil before this runs.
	made := tb
	defer func() {
		if err != nil {
			made.Close()
		}
	}()
	if tb.Gen, err = nsutil.New(prefix + "-gen"); err != nil {
		return nil, err
	}
	if tb.DUT, err = nsutil.New(prefix + "-dut"); err != nil {
		return nil, err
	}
	if tb.Sink, err = nsutil.New(prefix + "-sink"); err != nil {
		return nil, err
	}
	q := fmt.Sprintf("numtxqueues %d numrxqueues %d", o.Queues, o.Queues)
	gro := "on"
	if o.NoGRO {
		gro = "off"
	}
	offloads := "gro " + gro
	if o.TxChecksumOff {
		offloads += " tx off"
	}
	script := fmt.Sprintf(`
ip link add eth0 %[1]s type veth peer name in0 %[1]s netns %[2]s
ip link add sink0 %[1]s type veth peer name out0 %[1]s netns %[2]s
ip link set sink0 netns %[3]s
`, q, tb.DUT.Name, tb.Sink.Name)
	if o.NoRouterSolicit {
		l.gen.noRouterSolicit, l.sink.noRouterSolicit = true, true
	}
	if err := tb.Gen.BatchScript(script + l.gen.script(offloads)); err != nil {
		return nil, err
	}
	if err := tb.Sink.BatchScript("ip link set sink0 name eth0\n" + l.sink.script(offloads)); err != nil {
		return nil, err
	}
	if err := tb.DUT.BatchScript(l.dut(gro)); err != nil {
		return nil, err
	}
	tb.pings = l.pings(tb)
	// Collect MACs and ifindexes.
	get := func(ns *nsutil.NS, name string, mac *net.HardwareAddr, idx *int) error {
		return ns.Do(func() error {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return fmt.Errorf("%s in %s: %w", name, ns.Name, err)
			}
			*mac = l.Attrs().HardwareAddr
			if idx != nil {
				*idx = l.Attrs().Index
			}
			return nil
		})
	}
	for _, g := range []struct {
		ns   *nsutil.NS
		name string
		mac  *net.HardwareAddr
		idx  *int
	}{
		{tb.Gen, "eth0", &tb.GenMAC, &tb.GenIfindex}, {tb.Sink, "eth0", &tb.SinkMAC, &tb.SinkIfindex},
		{tb.DUT, "in0", &tb.InMAC, &tb.InIfindex}, {tb.DUT, "out0", &tb.OutMAC, &tb.OutIfindex},
	} {
		if err := get(g.ns, g.name, g.mac, g.idx); err != nil {
			return nil, err
		}
	}
	return tb, nil
}

// ResolveNeighbours makes the hosts resolve each other the ordinary way (ARP/ND by pinging):
// in the routed topology the DUT resolves gen and sink and each host its gateway; in the bridged
// one gen resolves the sink (and the bridge learns both on the way).
func (tb *Testbed) ResolveNeighbours() error {
	for _, p := range tb.pings {
		for _, a := range p.to {
			if _, err := p.from.Run("ping", "-c", "1", "-W", "2", a); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close removes the namespaces (and with them every device and program in them).
func (tb *Testbed) Close() error {
	var errs []error
	for _, ns := range []*nsutil.NS{tb.Gen, tb.DUT, tb.Sink} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

// Linuxfp is a `linuxfp run` process in the DUT.
type Linuxfp struct {
	cmd    *exec.Cmd
	Client *status.Client
	Log    *SyncBuffer
	done   chan error
}

// StartLinuxfp starts bin run in the DUT and waits until it has programs on in0 and out0.
func (tb *Testbed) StartLinuxfp(bin string, args ...string) (*Linuxfp, error) {
	return tb.StartLinuxfpUntil(bin, func(st *status.Status) bool {
		n := 0
		for _, it := range st.Interfaces {
			if (it.Name == "in0" || it.Name == "out0") && it.Program != nil {
				n++
			}
		}
		return n == 2
	}, args...)
}

// StartLinuxfpUntil starts bin run in the DUT and waits until ready holds.
func (tb *Testbed) StartLinuxfpUntil(bin string, ready func(*status.Status) bool, args ...string) (*Linuxfp, error) {
	return StartLinuxfpIn(tb.DUT, bin, ready, args...)
}

// StartLinuxfpIn starts bin run in the namespace ns and waits until ready holds.
func StartLinuxfpIn(ns *nsutil.NS, bin string, ready func(*status.Status) bool, args ...string) (*Linuxfp, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, bin, "run"}, args...)...)
	log := &SyncBuffer{}
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start linuxfp: %w", err)
	}
	l := &Linuxfp{cmd: cmd, Log: log, done: make(chan error, 1), Client: StatusClientIn(ns)}
	go func() { l.done <- cmd.Wait() }()
	if err := l.WaitFor(10*time.Second, ready); err != nil {
		l.Kill()
		return nil, fmt.Errorf("%w; log:\n%s", err, log.String())
	}
	return l, nil
}

// StatusClient talks to the controller in the DUT.
func (tb *Testbed) StatusClient() *status.Client { return StatusClientIn(tb.DUT) }

// StatusClientIn talks to the controller in the namespace ns (its status socket is an abstract
// unix socket, which belongs to the namespace).
func StatusClientIn(ns *nsutil.NS) *status.Client {
	return status.NewClientWithDialer(func(ctx context.Context) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var err error
			c, err = net.Dial("unix", status.SocketName)
			return err
		})
		return c, err
	})
}

// WaitFor polls the status until cond holds.
func (l *Linuxfp) WaitFor(timeout time.Duration, cond func(*status.Status) bool) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-l.done:
			l.done <- err
			return fmt.Errorf("linuxfp exited: %v", err)
		default:
		}
		st, err := l.Client.Status()
		if err == nil && cond(st) {
			return nil
		}
		last = err
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s waiting for linuxfp (last error: %v)", timeout, last)
}

// Interface returns the status of one interface.
func (l *Linuxfp) Interface(name string) (*status.Interface, error) {
	st, err := l.Client.Status()
	if err != nil {
		return nil, err
	}
	for _, it := range st.Interfaces {
		if it.Name == name {
			return &it, nil
		}
	}
	return nil, fmt.Errorf("no interface %s in status", name)
}

// Signal sends sig to linuxfp (SIGSTOP to freeze its controller while the data plane runs on).
func (l *Linuxfp) Signal(sig os.Signal) error { return l.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits for a clean exit.
func (l *Linuxfp) Stop() error { return l.StopWith(syscall.SIGTERM) }

// StopWith sends sig and waits (up to 10 s) for linuxfp to exit.
func (l *Linuxfp) StopWith(sig os.Signal) error {
	l.cmd.Process.Signal(sig)
	select {
	case err := <-l.done:
		l.done <- err
		return err
	case <-time.After(10 * time.Second):
		l.Kill()
		return fmt.Errorf("linuxfp did not stop within 10s of %v", sig)
	}
}

// Kill sends SIGKILL (to ip netns exec's child, linuxfp itself) and waits.
func (l *Linuxfp) Kill() {
	l.cmd.Process.Signal(os.Kill)
	select {
	case err := <-l.done:
		l.done <- err
	case <-time.After(5 * time.Second):
	}
}

// SyncBuffer collects a process's output; safe for concurrent writes.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
