package eval_test

// The randomized differential test: random small rulesets (iptables and ip6tables in raw, mangle,
// nat and filter, user chains with jumps, gotos and returns, random policies, ipsets, and native
// nft chains at random priorities, with supported and unsupported matches and targets) are
// loaded into a router namespace; random packets are sent through it from a client namespace
// and captured in a server namespace. Whenever the evaluator (on the ruleset read back from the
// kernel) says Accept, the packet must arrive; whenever it says Drop, it must not.
//
//	cli c0  <-> eth0     198.18.0.1/24   2001:2::1/64      [rtr]   eth1     198.18.2.1/24  2001:2:0:2::1/64  <-> s0  srv
//	    c1  <-> vethin1  198.18.1.1/24   2001:2:0:1::1/64          vethout2 198.18.3.1/24  2001:2:0:3::1/64  <-> s1
//
// (The shape tests give the router's devices other names.) The router sends 198.19.0.0/17 and
// 2001:2:0:f100::/64 out of eth1, 198.19.128.0/17 and 2001:2:0:f200::/64 out of vethout2. Sources are spoofed
// from 198.18.0.0/16 and 2001:2::/48 (rp_filter off). Packets cross namespaces, so their mark is 0.
// Conntrack is flushed before each batch: every packet starts a connection, which is what the
// evaluator's treatment of the NAT chains assumes.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/packet"
)

const (
	diffRulesets = 60 // per run; each with diffPackets packets
	diffPackets  = 60
)

type topo struct {
	cli, rtr, srv *nsutil.NS
	// Client devices, the router MACs they send to and the router devices behind them.
	cliDev []string
	cliIdx []int
	rtrMAC []net.HardwareAddr
	rtrIn  []string
	// Router devices towards the server: 198.19.0.0/17 and 2001:2:0:f100::/64 through rtrOut[0],
	// 198.19.128.0/17 and 2001:2:0:f200::/64 through rtrOut[1].
	rtrOut []string
	cliFD  int
	srvFD  []int
}

// newTopo builds the three namespaces; the router's devices get the names given (two on the
// client side, two on the server side).
func newTopo(t *testing.T, in0, in1, out0, out1 string) *topo {
	return newTopoNamed(t, "lfp-filt", in0, in1, out0, out1)
}

// newTopoNamed is newTopo with the namespaces' names starting with prefix.
func newTopoNamed(t *testing.T, prefix, in0, in1, out0, out1 string) *topo {
	tp := &topo{
		cli:    filtertest.NewNS(t, prefix+"-cli"),
		rtr:    filtertest.NewNS(t, prefix+"-rtr"),
		srv:    filtertest.NewNS(t, prefix+"-srv"),
		rtrIn:  []string{in0, in1},
		rtrOut: []string{out0, out1},
	}
	script := fmt.Sprintf(`
ip link add %[3]s type veth peer name c0 netns %[1]s
ip link add %[4]s type veth peer name c1 netns %[1]s
ip link add %[5]s type veth peer name s0 netns %[2]s
ip link add %[6]s type veth peer name s1 netns %[2]s
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.ipv6.conf.all.forwarding=1
sysctl -qw net.ipv4.conf.all.rp_filter=0
sysctl -qw net.ipv4.conf.default.rp_filter=0
ip addr add 198.18.0.1/24 dev %[3]s
ip addr add 198.18.1.1/24 dev %[4]s
ip addr add 198.18.2.1/24 dev %[5]s
ip addr add 198.18.3.1/24 dev %[6]s
ip -6 addr add 2001:2::1/64 dev %[3]s nodad
ip -6 addr add 2001:2:0:1::1/64 dev %[4]s nodad
ip -6 addr add 2001:2:0:2::1/64 dev %[5]s nodad
ip -6 addr add 2001:2:0:3::1/64 dev %[6]s nodad
ip link set %[3]s up
ip link set %[4]s up
ip link set %[5]s up
ip link set %[6]s up
`, tp.cli.Name, tp.srv.Name, in0, in1, out0, out1)
	if err := tp.rtr.Script(script); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{in0, in1, out0, out1} {
		if err := tp.rtr.Script("sysctl -qw net/ipv4/conf/" + dev + "/rp_filter=0"); err != nil { // slashes: names may hold dots
			t.Fatal(err)
		}
	}
	for _, ns := range []*nsutil.NS{tp.cli, tp.srv} {
		if err := ns.Script("sysctl -qw net.ipv6.conf.all.disable_ipv6=1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.cli.Script("ip link set c0 up\nip link set c1 up"); err != nil {
		t.Fatal(err)
	}
	if err := tp.srv.Script("ip link set s0 up\nip link set s1 up"); err != nil {
		t.Fatal(err)
	}
	// Routes to the server side through permanent neighbours (no ARP/ND during the test).
	s0, s1 := macOf(t, tp.srv, "s0"), macOf(t, tp.srv, "s1")
	if err := tp.rtr.Script(fmt.Sprintf(`
ip neigh replace 198.18.2.2 lladdr %[1]s dev %[3]s nud permanent
ip neigh replace 198.18.3.2 lladdr %[2]s dev %[4]s nud permanent
ip -6 neigh replace 2001:2:0:2::2 lladdr %[1]s dev %[3]s nud permanent
ip -6 neigh replace 2001:2:0:3::2 lladdr %[2]s dev %[4]s nud permanent
ip route add 198.19.0.0/17 via 198.18.2.2 dev %[3]s
ip route add 198.19.128.0/17 via 198.18.3.2 dev %[4]s
ip -6 route add 2001:2:0:f100::/64 via 2001:2:0:2::2 dev %[3]s
ip -6 route add 2001:2:0:f200::/64 via 2001:2:0:3::2 dev %[4]s
`, s0, s1, out0, out1)); err != nil {
		t.Fatal(err)
	}
	tp.cliDev = []string{"c0", "c1"}
	tp.rtrMAC = []net.HardwareAddr{macOf(t, tp.rtr, in0), macOf(t, tp.rtr, in1)}
	for _, d := range tp.cliDev {
		tp.cliIdx = append(tp.cliIdx, ifindex(t, tp.cli, d))
	}
	err := tp.cli.Do(func() (err error) {
		tp.cliFD, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(tp.cliFD) })
	for _, d := range []string{"s0", "s1"} {
		idx := ifindex(t, tp.srv, d)
		var fd int
		err := tp.srv.Do(func() (err error) {
			fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return err
			}
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
				return err
			}
			tv := unix.NsecToTimeval((20 * time.Millisecond).Nanoseconds())
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return err
			}
			return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: idx})
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		tp.srvFD = append(tp.srvFD, fd)
	}
	return tp
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Local routes that cover destinations of the pools that the router forwards all the same.
const (
	// In a table no rule looks up: `fib daddr type local` is false.
	localElsewhere = `
ip route add local 198.19.200.0/24 dev lo table 100
ip -6 route add local 2001:2:0:f200::1c8/128 dev lo table 100
`
	// In the local table, with a rule before it that routes them by the main table: IPv4's
	// `fib daddr type local` (the local table alone) is true, IPv6's (a route lookup through
	// the rules) false.
	localForwarded = `
ip route add local 198.19.200.0/24 dev lo table local
ip rule add pref 10 to 198.19.200.0/24 lookup main
ip rule del pref 0
ip rule add pref 100 lookup local
ip -6 route add local 2001:2:0:f200::1c8/128 dev lo table local
ip -6 rule add pref 10 to 2001:2:0:f200::1c8/128 lookup main
ip -6 rule del pref 0
ip -6 rule add pref 100 lookup local
`
)

// localRoutes adds the local routes of script (the evaluator's "maybe" for the addresses they
// cover) and returns what the controller reads as the router's local routes (observe: local,
// broadcast, anycast and multicast routes of every table).
func (tp *topo) localRoutes(t *testing.T, script string) []netip.Prefix {
	t.Helper()
	if err := tp.rtr.Script(script); err != nil {
		t.Fatal(err)
	}
	nh, err := netlink.NewHandleAt(tp.rtr.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	var out []netip.Prefix
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := nh.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range rs {
			switch rt.Type {
			case unix.RTN_LOCAL, unix.RTN_BROADCAST, unix.RTN_ANYCAST, unix.RTN_MULTICAST:
				if rt.Dst != nil {
					a, _ := netip.AddrFromSlice(rt.Dst.IP)
					ones, _ := rt.Dst.Mask.Size()
					out = append(out, netip.PrefixFrom(a.Unmap(), ones))
				}
			}
		}
	}
	return out
}

func macOf(t *testing.T, ns *nsutil.NS, dev string) net.HardwareAddr {
	var mac net.HardwareAddr
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

func ifindex(t *testing.T, ns *nsutil.NS, dev string) int {
	var idx int
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		idx = ifi.Index
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return idx
}

// Address pools: sources (client side, never the router's or clients' own addresses) and
// destinations (server side, through eth1 or vethout2).
var (
	src4 = []string{"198.18.0.10", "198.18.0.11", "198.18.0.77", "198.18.1.20", "198.18.1.21", "198.18.9.5", "198.18.9.200", "198.18.128.3"}
	dst4 = []string{"198.19.0.5", "198.19.0.6", "198.19.1.9", "198.19.100.1", "198.19.128.5", "198.19.128.6", "198.19.200.1", "198.19.255.7"}
	src6 = []string{"2001:2::10", "2001:2::11", "2001:2::7f", "2001:2:0:1::20", "2001:2:0:1::21", "2001:2:0:9::5", "2001:2:0:9::c8", "2001:2:0:8000::3"}
	dst6 = []string{"2001:2:0:f100::5", "2001:2:0:f100::6", "2001:2:0:f100::109", "2001:2:0:f100::ff01", "2001:2:0:f200::5", "2001:2:0:f200::6", "2001:2:0:f200::1c8", "2001:2:0:f200::ff07"}

	ports   = []uint16{22, 53, 80, 443, 1000, 1500, 8080, 65535}
	inDevs  = []string{"eth0", "vethin1", "eth+", "veth+", "vethin+", "e+", "vethout2", "eth1"}
	outDevs = []string{"eth1", "vethout2", "eth+", "veth+", "vethout+", "v+", "eth0", "vethin1"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// prefix returns a random prefix around an address of the pool.
func prefix(r *rand.Rand, pool []string) string {
	a := netip.MustParseAddr(pick(r, pool))
	var bits int
	if a.Is4() {
		bits = pick(r, []int{32, 32, 31, 30, 24, 23, 17, 16, 15})
	} else {
		bits = pick(r, []int{128, 128, 127, 126, 120, 64, 63, 48, 47})
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// portRange is "a:b" with a < b (iptables refuses a:a in multiport).
func portRange(r *rand.Rand) string {
	a, b := pick(r, ports), pick(r, ports)
	for a == b {
		b = pick(r, ports)
	}
	if a > b {
		a, b = b, a
	}
	return fmt.Sprintf("%d:%d", a, b)
}

type gen struct {
	r  *rand.Rand
	v6 bool
}

func (g *gen) srcs() []string {
	if g.v6 {
		return src6
	}
	return src4
}

func (g *gen) dsts() []string {
	if g.v6 {
		return dst6
	}
	return dst4
}

func (g *gen) not() string {
	if g.r.IntN(4) == 0 {
		return "! "
	}
	return ""
}

// matches returns random iptables matches valid in chain hook (pre, fwd, post; "" for a user chain
// that more than one hook may call).
func (g *gen) matches(table, hook string) string {
	r := g.r
	var m []string
	if r.IntN(3) == 0 {
		m = append(m, g.not()+"-s "+prefix(r, g.srcs()))
	}
	if r.IntN(3) == 0 {
		m = append(m, g.not()+"-d "+prefix(r, g.dsts()))
	}
	if (hook == "pre" || hook == "fwd" || table == "filter") && r.IntN(4) == 0 {
		m = append(m, g.not()+"-i "+pick(r, inDevs))
	}
	if (hook == "post" || hook == "fwd" || table == "filter") && r.IntN(4) == 0 {
		m = append(m, g.not()+"-o "+pick(r, outDevs))
	}
	icmp := "icmp"
	if g.v6 {
		icmp = "ipv6-icmp"
	}
	switch r.IntN(8) {
	case 0, 1:
		p := pick(r, []string{"tcp", "udp"})
		m = append(m, "-p "+p)
		switch r.IntN(5) {
		case 0:
			m = append(m, g.not()+"--dport "+fmt.Sprint(pick(r, ports)))
		case 1:
			m = append(m, g.not()+"--sport "+portRange(r))
		case 2:
			var ps []string
			for range 1 + r.IntN(3) {
				ps = append(ps, fmt.Sprint(pick(r, ports)))
			}
			if r.IntN(2) == 0 {
				ps = append(ps, portRange(r))
			}
			m = append(m, "-m multiport "+g.not()+pick(r, []string{"--sports ", "--dports ", "--ports "})+strings.Join(ps, ","))
		case 3:
			if p == "tcp" && r.IntN(2) == 0 {
				m = append(m, "--tcp-flags SYN,ACK ACK") // not modelled
			}
		case 4:
			m = append(m, "-m "+p) // an xt tcp/udp match with every port
		}
	case 2:
		m = append(m, "-p "+icmp)
		if r.IntN(2) == 0 {
			t := pick(r, []string{"8", "0", "3/4", "11", "any"})
			if g.v6 {
				t = pick(r, []string{"128", "129", "1/3", "3"})
			}
			flag := "--icmp-type "
			if g.v6 {
				flag = "--icmpv6-type "
			}
			m = append(m, g.not()+flag+t)
		}
	case 3:
		m = append(m, g.not()+"-p "+pick(r, []string{"tcp", "udp", icmp, "47"}))
	}
	switch r.IntN(24) {
	case 0, 1, 2:
		sets := []string{"ip src", "ip dst", "net src", "net dst", "ipport src,dst", "ipport dst,dst", "netport src,src", "netport dst,dst", "ipport src", "net dst,src"}
		if !g.v6 {
			sets = append(sets, "ipm src", "ipm dst")
		}
		s := strings.Fields(pick(r, sets))
		fam := "4"
		if g.v6 {
			fam = "6"
		}
		m = append(m, "-m set "+g.not()+"--match-set s"+fam+s[0]+" "+s[1])
	case 3:
		m = append(m, "-m comment --comment \"random rule\"")
	case 4:
		m = append(m, "-m conntrack "+g.not()+"--ctstate "+pick(r, []string{"NEW", "RELATED,ESTABLISHED", "INVALID", "NEW,UNTRACKED", "ESTABLISHED"}))
	case 8:
		m = append(m, "-m state --state "+pick(r, []string{"NEW", "ESTABLISHED", "INVALID,NEW"}))
	case 5:
		m = append(m, "-m mark "+g.not()+pick(r, []string{"--mark 0x1", "--mark 0x0/0xffff", "--mark 0x4000/0x4000"}))
	case 6:
		m = append(m, "-m limit --limit 1000/second --limit-burst 1000") // not modelled, stateful
	case 7:
		m = append(m, "-m length --length 0:1000") // not modelled
	case 9:
		m = append(m, g.addrtype(hook, true))
	}
	return strings.Join(m, " ")
}

// addrtype is a random `-m addrtype` match valid in chain hook (as matches takes it); with
// unmodelled, also the forms the model leaves Unknown (other types, several types, an IPv6
// interface limit).
func (g *gen) addrtype(hook string, unmodelled bool) string {
	r := g.r
	types := []string{"LOCAL", "LOCAL", "LOCAL", "MULTICAST"}
	if unmodelled {
		if g.v6 {
			types = append(types, "UNICAST", "LOCAL,UNICAST", "ANYCAST")
		} else {
			types = append(types, "UNICAST", "BROADCAST", "LOCAL,MULTICAST")
		}
	}
	side := func(flag string) string { return g.not() + flag + " " + pick(r, types) }
	var m string
	switch r.IntN(4) {
	case 0:
		m = side("--src-type")
	case 1:
		m = side("--src-type") + " " + side("--dst-type")
	default:
		m = side("--dst-type")
	}
	if (!g.v6 || unmodelled) && r.IntN(3) == 0 {
		switch hook {
		case "pre":
			m += " --limit-iface-in"
		case "fwd":
			m += pick(r, []string{" --limit-iface-in", " --limit-iface-out"})
		case "post":
			m += " --limit-iface-out"
		}
	}
	return "-m addrtype " + m
}

// iptables returns a random iptables-save ruleset.
func (g *gen) iptables() string {
	r := g.r
	var b strings.Builder
	policy := func() string {
		if r.IntN(6) == 0 {
			return "DROP"
		}
		return "ACCEPT"
	}
	// chain: a built-in chain (hook set) or a user chain (hook ""); rules go only to the
	// forward path's chains and to user chains; targets are those valid there.
	type chain struct {
		name, hook string
		targets    []string
	}
	table := func(name string, builtins []chain, userTargets []string, withPolicy bool, present int) {
		fmt.Fprintf(&b, "*%s\n", name)
		if r.IntN(present) != 0 {
			// The table without rules (iptables-restore replaces what was there).
			for _, c := range builtins {
				fmt.Fprintf(&b, ":%s ACCEPT [0:0]\n", c.name)
			}
			b.WriteString("COMMIT\n")
			return
		}
		nuser := r.IntN(3)
		for _, c := range builtins {
			p := "ACCEPT"
			if withPolicy && c.targets != nil {
				p = policy()
			}
			fmt.Fprintf(&b, ":%s %s [0:0]\n", c.name, p)
		}
		for u := 1; u <= nuser; u++ {
			fmt.Fprintf(&b, ":U%d - [0:0]\n", u)
		}
		all := append([]chain(nil), builtins...)
		for u := 1; u <= nuser; u++ {
			all = append(all, chain{fmt.Sprintf("U%d", u), "", userTargets})
		}
		for ci, c := range all {
			if c.targets == nil {
				continue // input, output
			}
			for range r.IntN(6) {
				tgt := pick(r, c.targets)
				switch tgt {
				case "jump", "goto":
					// Only to user chains after this one: no loops.
					first := 1
					if ci >= len(builtins) {
						first = ci - len(builtins) + 2
					}
					if first > nuser {
						tgt = "RETURN"
						break
					}
					u := first + r.IntN(nuser-first+1)
					if tgt == "jump" {
						tgt = fmt.Sprintf("-j U%d", u)
					} else {
						tgt = fmt.Sprintf("-g U%d", u)
					}
				}
				if tgt != "" && !strings.HasPrefix(tgt, "-") {
					tgt = "-j " + tgt
				}
				fmt.Fprintf(&b, "-A %s %s %s\n", c.name, g.matches(name, c.hook), tgt)
			}
		}
		b.WriteString("COMMIT\n")
	}
	dnat := "198.19.0.99"
	snat := "198.18.2.1"
	if g.v6 {
		dnat, snat = "[2001:2:0:f100::99]", "2001:2:0:2::1"
	}
	raw := []string{"", "ACCEPT", "ACCEPT", "DROP", "RETURN", "jump", "goto", "CT --notrack"}
	table("raw", []chain{{"PREROUTING", "pre", raw}, {"OUTPUT", "out", nil}}, raw, true, 3)
	mangle := []string{"", "ACCEPT", "ACCEPT", "DROP", "RETURN", "jump", "goto", "MARK --set-mark 0x2"}
	table("mangle", []chain{{"PREROUTING", "pre", mangle}, {"INPUT", "in", nil}, {"FORWARD", "fwd", mangle}, {"OUTPUT", "out", nil}, {"POSTROUTING", "post", mangle}}, mangle, true, 3)
	nat := []string{"", "ACCEPT", "ACCEPT", "RETURN", "jump", "goto"}
	table("nat", []chain{
		{"PREROUTING", "pre", append([]string{"DNAT --to-destination " + dnat}, nat...)},
		{"INPUT", "in", nil}, {"OUTPUT", "out", nil},
		{"POSTROUTING", "post", append([]string{"SNAT --to-source " + snat, "MASQUERADE"}, nat...)},
	}, nat, false, 2)
	filter := []string{"", "ACCEPT", "ACCEPT", "ACCEPT", "DROP", "DROP", "DROP", "RETURN", "jump", "jump", "goto", "REJECT", "LOG"}
	table("filter", []chain{{"INPUT", "in", nil}, {"FORWARD", "fwd", filter}, {"OUTPUT", "out", nil}}, filter, true, 1)
	return b.String()
}

// nft returns a random native nftables table (or nothing).
func (g *gen) nft() string {
	r := g.r
	if r.IntN(2) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("table inet lfpdiff {\n")
	b.WriteString(g.nftSets())
	b.WriteString("\tchain sub {\n")
	rule := func() string {
		var m []string
		v6 := r.IntN(2) == 0 // nft refuses ip and ip6 (or tcp and udp) matches in one rule
		l4 := pick(r, []string{"tcp", "udp"})
		for range 1 + r.IntN(2) {
			switch r.IntN(21) {
			case 0, 9:
				if v6 {
					m = append(m, "ip6 saddr "+prefix(r, src6))
				} else {
					m = append(m, "ip saddr "+prefix(r, src4))
				}
			case 1, 10:
				if v6 {
					m = append(m, "ip6 daddr "+prefix(r, dst6))
				} else {
					m = append(m, "ip daddr "+prefix(r, dst4))
				}
			case 2, 11:
				m = append(m, l4+" dport "+fmt.Sprint(pick(r, ports)))
			case 3, 12:
				m = append(m, fmt.Sprintf("iifname %q", strings.ReplaceAll(pick(r, inDevs), "+", "*")))
			case 4, 13:
				m = append(m, fmt.Sprintf("oifname %s%q", pick(r, []string{"", "!= "}), strings.ReplaceAll(pick(r, outDevs), "+", "*")))
			case 5:
				m = append(m, "meta l4proto "+l4, pick(r, []string{"meta mark 0x0", "meta mark != 0x0", "meta mark and 0x4000 == 0x4000", ""}))
			case 6:
				m = append(m, pick(r, []string{"ct state new", "ct state established,related", "ct state != invalid", "ct state == new", "ct state { new, established }"}))
			case 7:
				m = append(m, l4+" dport "+pick(r, []string{"", "!= "})+pick(r, []string{"{ 53, 80 }", "{ 22-80, 443 }", "@p"}))
			case 14, 15:
				// Address sets: named, of single addresses or intervals, and anonymous.
				ip, fam := "ip", "4"
				if v6 {
					ip, fam = "ip6", "6"
				}
				set := pick(r, []string{"@a" + fam, "@n" + fam, "@n" + fam, "{ " + g.nftElements(v6, true, 1+r.IntN(3)) + " }"})
				if set == "{  }" {
					set = "@n" + fam
				}
				m = append(m, ip+pick(r, []string{" saddr ", " daddr ", " daddr "})+pick(r, []string{"", "", "!= "})+set)
			case 16:
				m = append(m, l4+" sport "+pick(r, []string{"", "!= "})+"@p")
			case 17:
				m = append(m, "meta mark "+pick(r, []string{"", "!= "})+"{ 0x1, 0x2 }") // not modelled (a lookup of the mark)
			case 18:
				m = append(m, g.concatLookup(v6, l4))
			case 8:
				m = append(m, l4+" sport "+fmt.Sprint(pick(r, ports)))
			case 19:
				m = append(m, "fib "+pick(r, []string{"saddr", "daddr", "daddr"})+" type "+pick(r, []string{"", "", "!= "})+"local")
			case 20:
				m = append(m, pick(r, []string{"fib daddr type broadcast", "fib saddr type { local, broadcast }"})) // not modelled
			}
		}
		m = append(m, "counter", pick(r, []string{"accept", "drop", "drop", "", "return", "jump sub", "log"}))
		return strings.Join(m, " ")
	}
	for range r.IntN(3) {
		s := rule()
		if strings.Contains(s, "jump sub") {
			s = strings.Replace(s, "jump sub", "drop", 1)
		}
		b.WriteString("\t\t" + s + "\n")
	}
	b.WriteString("\t}\n")
	for i := range 1 + r.IntN(2) {
		hook := pick(r, []string{"prerouting", "forward", "forward", "postrouting"})
		prio := pick(r, []int{-350, -150, -120, 0, 10, 150})
		policy := "accept"
		if r.IntN(8) == 0 {
			policy = "drop"
		}
		fmt.Fprintf(&b, "\tchain base%d {\n\t\ttype filter hook %s priority %d; policy %s;\n", i, hook, prio, policy)
		for range r.IntN(4) {
			b.WriteString("\t\t" + rule() + "\n")
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// concatLookup is a random lookup of a concatenation, plain or negated, in a named set or an
// anonymous one.
func (g *gen) concatLookup(v6 bool, l4 string) string {
	r := g.r
	ip, fam, srcs, dsts := "ip", "4", src4, dst4
	if v6 {
		ip, fam, srcs, dsts = "ip6", "6", src6, dst6
	}
	op := pick(r, []string{"", "", "!= "})
	switch r.IntN(4) {
	case 0:
		return ip + " daddr . " + l4 + " dport " + op + "@c" + fam
	case 1:
		return ip + " saddr . " + ip + " daddr " + op + "@sd" + fam
	case 2:
		// (A protocol set before it, `meta l4proto { tcp, udp }`, would conflict with the
		// rule's other port matches in nft's eyes.)
		return "meta l4proto " + l4 + " " + ip + " daddr . meta l4proto . th dport " + op + "@k" + fam
	}
	a, b := r.IntN(len(srcs)), r.IntN(len(dsts))
	return fmt.Sprintf("%s saddr . %s dport %s{ %s . %d, %s . %d }", ip, l4, op, srcs[a], pick(r, ports), srcs[(a+1)%len(srcs)], pick(r, ports)) +
		fmt.Sprintf(" %s daddr != %s", ip, dsts[b])
}

// nftSets declares the named sets the native rules look up, with random members around the
// pools' addresses and ports (intervals that touch and that end or start next to a pool address
// included).
func (g *gen) nftSets() string {
	r := g.r
	var b strings.Builder
	set := func(name, typ, flags, elems string) {
		fmt.Fprintf(&b, "\tset %s {\n\t\ttype %s;%s\n", name, typ, flags)
		if elems != "" {
			fmt.Fprintf(&b, "\t\telements = { %s }\n", elems)
		}
		b.WriteString("\t}\n")
	}
	set("a4", "ipv4_addr", "", g.nftElements(false, false, r.IntN(4)))
	set("n4", "ipv4_addr", " flags interval;", g.nftElements(false, true, r.IntN(4)))
	set("a6", "ipv6_addr", "", g.nftElements(true, false, r.IntN(4)))
	set("n6", "ipv6_addr", " flags interval;", g.nftElements(true, true, r.IntN(4)))
	var ps []string
	used := map[uint16]bool{}
	for range r.IntN(4) {
		p := pick(r, ports)
		if used[p] {
			continue
		}
		used[p] = true
		if p < 65000 && r.IntN(2) == 0 {
			ps = append(ps, fmt.Sprintf("%d-%d", p, p+uint16(r.IntN(3))))
			used[p+1], used[p+2] = true, true
			continue
		}
		ps = append(ps, fmt.Sprint(p))
	}
	set("p", "inet_service", " flags interval;", strings.Join(ps, ", "))
	// Concatenations of exact keys: destination . port, source . destination, destination .
	// protocol . port.
	concat := func(name, typ string, key func() string) {
		used := map[string]bool{}
		var els []string
		for range r.IntN(5) {
			if k := key(); !used[k] {
				used[k] = true
				els = append(els, k)
			}
		}
		set(name, typ, "", strings.Join(els, ", "))
	}
	port := func() string { return fmt.Sprint(pick(r, ports)) }
	proto := func() string { return pick(r, []string{"tcp", "udp", "tcp", "udp", "icmp", "gre"}) }
	concat("c4", "ipv4_addr . inet_service", func() string { return pick(r, dst4) + " . " + port() })
	concat("c6", "ipv6_addr . inet_service", func() string { return pick(r, dst6) + " . " + port() })
	concat("sd4", "ipv4_addr . ipv4_addr", func() string { return pick(r, src4) + " . " + pick(r, dst4) })
	concat("sd6", "ipv6_addr . ipv6_addr", func() string { return pick(r, src6) + " . " + pick(r, dst6) })
	// A protocol without ports in an element that has one: never the key of a packet that
	// reaches the lookup (a protocol with ports is required before it).
	concat("k4", "ipv4_addr . inet_proto . inet_service", func() string { return pick(r, dst4) + " . " + proto() + " . " + port() })
	concat("k6", "ipv6_addr . inet_proto . inet_service", func() string { return pick(r, dst6) + " . " + proto() + " . " + port() })
	// Verdict maps as kube-proxy's (address . protocol . port, protocol . port), whose elements
	// accept, drop, go to a chain that drops or jump to one that returns.
	b.WriteString("\tchain vdrop {\n\t\tdrop\n\t}\n\tchain vret {\n\t\tcounter\n\t}\n")
	vmap := func(name, typ string, key func() string) {
		used := map[string]bool{}
		var els []string
		for range r.IntN(5) {
			k := key()
			if !used[k] {
				used[k] = true
				els = append(els, k+" : "+pick(r, []string{"accept", "drop", "goto vdrop", "jump vret"}))
			}
		}
		fmt.Fprintf(&b, "\tmap %s {\n\t\ttype %s : verdict;\n", name, typ)
		if len(els) > 0 {
			fmt.Fprintf(&b, "\t\telements = { %s }\n", strings.Join(els, ", "))
		}
		b.WriteString("\t}\n")
	}
	l4 := func() string { return pick(r, []string{"tcp", "udp"}) + fmt.Sprintf(" . %d", pick(r, ports)) }
	vmap("v4", "ipv4_addr . inet_proto . inet_service", func() string { return pick(r, dst4) + " . " + l4() })
	vmap("v6", "ipv6_addr . inet_proto . inet_service", func() string { return pick(r, dst6) + " . " + l4() })
	vmap("vp", "inet_proto . inet_service", l4)
	return b.String()
}

// nftElements returns up to n set elements (addresses, or with interval also prefixes and
// ranges) that do not overlap.
func (g *gen) nftElements(v6, interval bool, n int) string {
	r := g.r
	pool := append(append([]string(nil), src4...), dst4...)
	if v6 {
		pool = append(append([]string(nil), src6...), dst6...)
	}
	type span struct{ from, to netip.Addr }
	var taken []span
	var out []string
	for range n {
		a := netip.MustParseAddr(pick(r, pool))
		sp := span{a, a}
		text := a.String()
		if interval {
			switch r.IntN(4) {
			case 0:
				pf := netip.MustParsePrefix(prefix(r, pool))
				sp = span{pf.Masked().Addr(), lastAddr(pf.Masked())}
				text = pf.Masked().String()
			case 1, 2:
				// A range starting at, before or after the address.
				switch r.IntN(3) {
				case 0:
					sp.from = sp.from.Prev()
				case 1:
					sp.from = sp.from.Next()
				}
				sp.to = sp.from
				for range pick(r, []int{1, 2, 5}) {
					sp.to = sp.to.Next()
				}
				text = sp.from.String() + "-" + sp.to.String()
			}
		}
		if slices.ContainsFunc(taken, func(o span) bool { return !(sp.to.Less(o.from) || o.to.Less(sp.from)) }) {
			continue
		}
		taken = append(taken, sp)
		out = append(out, text)
	}
	return strings.Join(out, ", ")
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// ipsets returns an `ipset restore` script refilling the sets created by setupSets.
func (g *gen) ipsets(v6 bool) string {
	r := g.r
	fam, srcs, dsts := "4", src4, dst4
	icmp := "icmp:8/0"
	if v6 {
		fam, srcs, dsts, icmp = "6", src6, dst6, "icmpv6:128/0"
	}
	all := append(append([]string(nil), srcs...), dsts...)
	var b strings.Builder
	for _, s := range []string{"ip", "net", "ipport", "netport", "ipm"} {
		if s == "ipm" && v6 {
			continue
		}
		name := "s" + fam + s
		fmt.Fprintf(&b, "flush %s\n", name)
		for range r.IntN(5) {
			var e string
			switch s {
			case "ip", "ipm":
				e = pick(r, all)
			case "net":
				e = prefix(r, all)
				if r.IntN(3) == 0 {
					e += " nomatch"
				}
			case "ipport":
				e = pick(r, all) + "," + pick(r, []string{"tcp:80", "udp:53", "tcp:22", icmp, "udp:1000"})
			case "netport":
				e = prefix(r, all) + "," + pick(r, []string{"tcp:80", "udp:53", "tcp:22", icmp, "udp:1000"})
				if r.IntN(4) == 0 {
					e += " nomatch"
				}
			}
			// Drop host routes' netmask duplicates silently: -exist.
			fmt.Fprintf(&b, "add %s %s -exist\n", name, e)
		}
	}
	return b.String()
}

const setupSets = `
create s4ip hash:ip family inet
create s4ipm hash:ip family inet netmask 24
create s4net hash:net family inet
create s4ipport hash:ip,port family inet
create s4netport hash:net,port family inet
create s6ip hash:ip family inet6
create s6net hash:net family inet6
create s6ipport hash:ip,port family inet6
create s6netport hash:net,port family inet6
`

// packet picks a random packet: addresses from the pools, an input device on the client side,
// and the output device the router's routes give.
func (g *gen) packet(tp *topo) eval.Packet {
	r := g.r
	p := eval.Packet{Family: model.IPv4}
	src, dst := src4, dst4
	icmp := uint8(model.ProtoICMP)
	if g.v6 {
		p.Family, src, dst, icmp = model.IPv6, src6, dst6, model.ProtoICMPv6
	}
	p.Src, p.Dst = netip.MustParseAddr(pick(r, src)), netip.MustParseAddr(pick(r, dst))
	p.In = pick(r, tp.rtrIn)
	switch r.IntN(4) {
	case 0:
		p.Proto = model.ProtoTCP
	case 1:
		p.Proto = model.ProtoUDP
	case 2:
		p.Proto = icmp
	case 3:
		p.Proto = 47
	}
	switch p.Proto {
	case model.ProtoTCP, model.ProtoUDP:
		p.SrcPort, p.DstPort = pick(r, ports), pick(r, ports)
		if r.IntN(3) == 0 {
			p.SrcPort = uint16(1024 + r.IntN(60000))
		}
		if p.Proto == model.ProtoUDP {
			// Conntrack is flushed before each batch and every packet goes from a client to
			// a server (no reply): its connection has seen no reply, so conntrack says NEW
			// (resolve_normal_ct()). (Other protocols' states depend on more: TCP flags,
			// ICMP types; left unknown, a ct state match is then a maybe.)
			p.CtState = model.CtNew
		}
	case model.ProtoICMP:
		tc := pick(r, [][2]uint8{{8, 0}, {0, 0}, {3, 4}, {3, 1}, {11, 0}})
		p.ICMPType, p.ICMPCode = tc[0], tc[1]
	case model.ProtoICMPv6:
		tc := pick(r, [][2]uint8{{128, 0}, {129, 0}, {1, 3}, {1, 4}, {3, 0}})
		p.ICMPType, p.ICMPCode = tc[0], tc[1]
	}
	return tp.route(p)
}

// route sets the output device as the router's routes choose it.
func (tp *topo) route(p eval.Packet) eval.Packet {
	p.Out = tp.rtrOut[0]
	if (p.Family == model.IPv4 && p.Dst.As4()[2] >= 128) || (p.Family == model.IPv6 && p.Dst.As16()[6] == 0xf2) {
		p.Out = tp.rtrOut[1]
	}
	return p
}

// frame builds p as the client sends it, with id in its payload; in is the client device.
func (tp *topo) frame(p eval.Packet, id uint64) (in int, frame []byte) {
	in = slices.Index(tp.rtrIn, p.In)
	spec := packet.Spec{
		SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: tp.rtrMAC[in], Src: p.Src, Dst: p.Dst,
		Proto: layers.IPProtocol(p.Proto), SrcPort: p.SrcPort, DstPort: p.DstPort,
		ICMPType: p.ICMPType, ICMPCode: p.ICMPCode,
	}
	marker := make([]byte, 12)
	copy(marker, "LFPF")
	binary.BigEndian.PutUint64(marker[4:], id)
	spec.Payload = marker
	return in, spec.Bytes()
}

var packetID uint64

// exchange sends packets through the router, captures what arrives, and compares with the
// evaluator on snap. mismatch is called for each packet where Linux did
// otherwise than an Accept or Drop verdict said. Conntrack is flushed first, so that every
// packet's connection is new, as the NAT chains' evaluation assumes.
func (tp *topo) exchange(t *testing.T, snap *nft.Snapshot, pkts []eval.Packet, mismatch func(eval.Packet, eval.Result, bool)) (map[eval.Verdict]int, int) {
	t.Helper()
	nh, err := netlink.NewHandleAt(tp.rtr.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	if err := nh.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		t.Fatal(err)
	}
	type sent struct {
		p   eval.Packet
		res eval.Result
	}
	batch := map[uint64]sent{}
	got := map[uint64]bool{}
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, fd := range tp.srvFD {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for {
				n, _, err := unix.Recvfrom(fd, buf, 0)
				if err != nil {
					select {
					case <-stop:
						return
					default:
						continue
					}
				}
				if i := bytes.Index(buf[:n], []byte("LFPF")); i >= 0 && i+12 <= n {
					mu.Lock()
					got[binary.BigEndian.Uint64(buf[i+4:])] = true
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range pkts {
		packetID++
		in, frame := tp.frame(p, packetID)
		res := eval.Evaluate(snap.Ruleset(p.Family), snap.Sets, p)
		batch[packetID] = sent{p, res}
		to := &unix.SockaddrLinklayer{Ifindex: tp.cliIdx[in], Protocol: binary.NativeEndian.Uint16(frame[12:14]), Halen: 6}
		copy(to.Addr[:], frame[0:6])
		if err := unix.Sendto(tp.cliFD, frame, 0, to); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	// Forwarding between veths is synchronous; the wait covers the capture goroutines.
	time.Sleep(60 * time.Millisecond)
	close(stop)
	wg.Wait()
	counts := map[eval.Verdict]int{}
	bad := 0
	for id, s := range batch {
		counts[s.res.Verdict]++
		arrived := got[id]
		if s.res.Verdict == eval.Linux || arrived == (s.res.Verdict == eval.Accept) {
			continue
		}
		bad++
		mismatch(s.p, s.res, arrived)
	}
	return counts, bad
}

func TestDifferential(t *testing.T) {
	filtertest.Require(t, "iptables-restore", "ip6tables-restore", "ipset", "nft", "sysctl")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LFP_FILTER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with LFP_FILTER_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0x1f))
	tp := newTopo(t, "eth0", "vethin1", "eth1", "vethout2")
	if err := filtertest.IPSetRestore(tp.rtr, setupSets); err != nil {
		t.Fatal(err)
	}
	local := tp.localRoutes(t, localElsewhere)

	counts := map[eval.Verdict]int{}
	mismatches := 0
	for rs := 0; rs < diffRulesets; rs++ {
		g := &gen{r: r}
		v4, v6 := g.iptables(), (&gen{r: r, v6: true}).iptables()
		sets := g.ipsets(false) + g.ipsets(true)
		native := g.nft()
		if err := filtertest.IPSetRestore(tp.rtr, sets); err != nil {
			t.Fatalf("ruleset %d: %v\n%s", rs, err, sets)
		}
		if err := filtertest.IPTablesRestore(tp.rtr, false, v4); err != nil {
			t.Fatalf("ruleset %d: %v\n%s", rs, err, v4)
		}
		if err := filtertest.IPTablesRestore(tp.rtr, true, v6); err != nil {
			t.Fatalf("ruleset %d: %v\n%s", rs, err, v6)
		}
		if err := filtertest.NFT(tp.rtr, "table inet lfpdiff\ndelete table inet lfpdiff\n"+native); err != nil {
			t.Fatalf("ruleset %d: %v\n%s", rs, err, native)
		}
		snap, err := filtertest.Read(tp.rtr)
		if err != nil {
			t.Fatal(err)
		}

		failed := 0
		if mismatches < 5 {
			failed = 5 - mismatches
		}
		var pkts []eval.Packet
		for range diffPackets {
			p := (&gen{r: r, v6: r.IntN(2) == 0}).packet(tp)
			p.SrcMaybeLocal, p.DstMaybeLocal = eval.MaybeLocal(p.Src, local), eval.MaybeLocal(p.Dst, local)
			pkts = append(pkts, p)
		}
		c, bad := tp.exchange(t, snap, pkts, func(p eval.Packet, res eval.Result, arrived bool) {
			if failed == 0 {
				return
			}
			failed--
			fam := v4
			if p.Family == model.IPv6 {
				fam = v6
			}
			t.Errorf("ruleset %d: %s: evaluator says %s (%s) but the packet %s\n--- iptables:\n%s--- nft:\n%s--- ipset:\n%s",
				rs, p, res.Verdict, res.Reason, map[bool]string{true: "arrived", false: "did not arrive"}[arrived], fam, native, sets)
		})
		mismatches += bad
		for v, n := range c {
			counts[v] += n
		}
	}
	total := counts[eval.Accept] + counts[eval.Drop] + counts[eval.Linux]
	t.Logf("%d packets through %d rulesets: accept %d, drop %d, linux %d; %d mismatches",
		total, diffRulesets, counts[eval.Accept], counts[eval.Drop], counts[eval.Linux], mismatches)
	// The comparison is only worth something if both verdicts are well represented.
	if counts[eval.Accept] < total/10 || counts[eval.Drop] < total/10 {
		t.Errorf("too few decided packets to compare (accept %d, drop %d of %d): the generator needs tuning", counts[eval.Accept], counts[eval.Drop], total)
	}
}

// TestDifferentialNFTSets is TestDifferential with only native set lookups in the forward
// chain, so that every packet meets them: random members around the pools' addresses (intervals
// that touch, start or end next to an address the packets use) and ports.
func TestDifferentialNFTSets(t *testing.T) {
	filtertest.Require(t, "nft", "sysctl")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LFP_FILTER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with LFP_FILTER_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0x3f))
	tp := newTopoNamed(t, "nfs-diff", "eth0", "vethin1", "eth1", "vethout2")
	counts := map[eval.Verdict]int{}
	mismatches := 0
	for rs := 0; rs < 30; rs++ {
		g := &gen{r: r}
		var b strings.Builder
		b.WriteString("table inet lfpdiff {\n" + g.nftSets() + "\tchain f {\n\t\ttype filter hook forward priority 0; policy accept;\n")
		for range 1 + r.IntN(4) {
			fam := pick(r, []string{"4", "6"})
			ip := map[string]string{"4": "ip", "6": "ip6"}[fam]
			l4 := pick(r, []string{"tcp", "udp"})
			anon := g.nftElements(fam == "6", true, 1+r.IntN(3))
			if !strings.Contains(anon, ",") {
				// One interval is no set: nft compiles it to two compares (>=, <=), which
				// the model does not read for addresses.
				anon = "198.19.0.5, 198.19.128.6"
				if fam == "6" {
					anon = "2001:2:0:f100::5, 2001:2:0:f200::6"
				}
			}
			srcs := map[string][]string{"4": src4, "6": src6}[fam]
			a := r.IntN(len(srcs))
			anonVmap := srcs[a] + " : drop, " + srcs[(a+1+r.IntN(len(srcs)-1))%len(srcs)] + " : " + pick(r, []string{"accept", "goto vdrop"})
			m := pick(r, []string{
				ip + " saddr @a" + fam, ip + " daddr @n" + fam, ip + " daddr != @n" + fam, ip + " saddr @n" + fam,
				ip + " daddr != @a" + fam, ip + " daddr { " + anon + " }",
				l4 + " dport @p", l4 + " sport != @p",
				"meta l4proto { tcp, udp } th dport @p", "meta l4proto { tcp, udp } th sport != { 53, 1000-1500 }",
				"meta l4proto != { tcp, icmp, ipv6-icmp }", "ip protocol { udp, gre }",
				ip + " daddr . meta l4proto . th dport vmap @v" + fam, "meta l4proto . th dport vmap @vp",
				ip + " saddr vmap { " + anonVmap + " }",
				g.concatLookup(fam == "6", l4), g.concatLookup(fam == "6", l4),
			})
			if strings.Contains(m, "vmap") {
				fmt.Fprintf(&b, "\t\t%s\n", m) // the map's verdict ends the rule
				continue
			}
			fmt.Fprintf(&b, "\t\t%s %s\n", m, pick(r, []string{"drop", "drop", "accept"}))
		}
		b.WriteString("\t}\n}\n")
		native := b.String()
		if err := filtertest.NFT(tp.rtr, "table inet lfpdiff\ndelete table inet lfpdiff\n"+native); err != nil {
			t.Fatalf("ruleset %d: %v\n%s", rs, err, native)
		}
		snap, err := filtertest.Read(tp.rtr)
		if err != nil {
			t.Fatal(err)
		}
		var pkts []eval.Packet
		for range diffPackets {
			p := (&gen{r: r, v6: r.IntN(2) == 0}).packet(tp)
			// Near the pools' addresses, where the intervals start and end.
			p.Src, p.Dst = near(r, p.Src), near(r, p.Dst)
			pkts = append(pkts, tp.route(p))
		}
		for _, p := range pkts {
			if res := eval.Evaluate(snap.Ruleset(p.Family), snap.Sets, p); res.Verdict == eval.Linux {
				t.Errorf("ruleset %d: %s: Linux (%s)\n%s", rs, p, res.Reason, native)
			}
		}
		c, bad := tp.exchange(t, snap, pkts, func(p eval.Packet, res eval.Result, arrived bool) {
			t.Errorf("ruleset %d: %s: evaluator says %s (%s) but the packet %s\n%s",
				rs, p, res.Verdict, res.Reason, map[bool]string{true: "arrived", false: "did not arrive"}[arrived], native)
		})
		mismatches += bad
		for v, n := range c {
			counts[v] += n
		}
		if mismatches > 5 {
			break
		}
	}
	t.Logf("accept %d, drop %d, linux %d; %d mismatches", counts[eval.Accept], counts[eval.Drop], counts[eval.Linux], mismatches)
	if counts[eval.Linux] > 0 {
		t.Errorf("%d packets were Linux's: every lookup here is modelled", counts[eval.Linux])
	}
	if counts[eval.Drop] == 0 || counts[eval.Accept] == 0 {
		t.Errorf("both verdicts must be exercised")
	}
}

// near moves a up to 3 addresses either way.
func near(r *rand.Rand, a netip.Addr) netip.Addr {
	switch d := r.IntN(7) - 3; {
	case d < 0:
		for range -d {
			a = a.Prev()
		}
	default:
		for range d {
			a = a.Next()
		}
	}
	return a
}

// TestDifferentialFib is TestDifferential with `fib saddr|daddr type [!=] local` in every rule of
// a forward and a prerouting chain, so that every packet meets them, and iptables' `-m addrtype`
// (LOCAL and MULTICAST, inverted or not, with an interface limit) in iptables' mangle PREROUTING
// and filter FORWARD; some destinations are covered by a local route and forwarded all the same
// (localForwarded: the evaluator's "maybe", where the kernel's answer is local for IPv4).
func TestDifferentialFib(t *testing.T) {
	filtertest.Require(t, "nft", "iptables-restore", "ip6tables-restore", "sysctl")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LFP_FILTER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with LFP_FILTER_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0x4f))
	tp := newTopoNamed(t, "fib-diff", "eth0", "vethin1", "eth1", "vethout2")
	local := tp.localRoutes(t, localForwarded)
	counts := map[eval.Verdict]int{}
	mismatches, byFib, byXT := 0, 0, 0
	// Every outcome exercised: accepted, dropped by a fib rule and by an addrtype rule, Linux's.
	covered := func() bool {
		return counts[eval.Accept] > 0 && byFib > byXT && byXT > 0 && counts[eval.Linux] > 0
	}
	// 20 random rulesets, and more (up to 40) while an outcome is missing: a seed's 20 can draw
	// no addrtype rule that drops a packet before another rule decides it.
	for rs := 0; rs < 20 || (rs < 40 && !covered()); rs++ {
		var b strings.Builder
		b.WriteString("table inet lfpdiff {\n")
		for i, hook := range []string{"prerouting", "forward"} {
			fmt.Fprintf(&b, "\tchain c%d {\n\t\ttype filter hook %s priority 0; policy accept;\n", i, hook)
			for range 1 + r.IntN(3) {
				m := "fib " + pick(r, []string{"saddr", "daddr"}) + " type " + pick(r, []string{"", "!= "}) + "local"
				switch r.IntN(3) {
				case 0:
					m = pick(r, []string{"ip saddr " + prefix(r, src4), "ip6 daddr " + prefix(r, dst6)}) + " " + m
				case 1:
					m += " " + pick(r, []string{"ip daddr " + prefix(r, dst4), "ip6 saddr " + prefix(r, src6), "meta l4proto udp"})
				}
				fmt.Fprintf(&b, "\t\t%s %s\n", m, pick(r, []string{"drop", "drop", "accept"}))
			}
			b.WriteString("\t}\n")
		}
		b.WriteString("}\n")
		native := b.String()
		if err := filtertest.NFT(tp.rtr, "table inet lfpdiff\ndelete table inet lfpdiff\n"+native); err != nil {
			t.Fatalf("ruleset %d: %v\n%s", rs, err, native)
		}
		// iptables' `-m addrtype` beside them, in mangle PREROUTING and filter FORWARD.
		xt := map[bool]string{}
		for _, v6 := range []bool{false, true} {
			g := &gen{r: r, v6: v6}
			var b strings.Builder
			for _, c := range []struct{ table, chain, hook string }{{"mangle", "PREROUTING", "pre"}, {"filter", "FORWARD", "fwd"}} {
				fmt.Fprintf(&b, "*%s\n:%s ACCEPT [0:0]\n", c.table, c.chain)
				for range r.IntN(3) {
					m := g.addrtype(c.hook, false)
					if r.IntN(3) == 0 {
						m = pick(r, []string{"-s " + prefix(r, g.srcs()), "-d " + prefix(r, g.dsts()), "-p udp"}) + " " + m
					}
					fmt.Fprintf(&b, "-A %s %s -j %s\n", c.chain, m, pick(r, []string{"DROP", "DROP", "ACCEPT"}))
				}
				b.WriteString("COMMIT\n")
			}
			xt[v6] = b.String()
			if err := filtertest.IPTablesRestore(tp.rtr, v6, xt[v6]); err != nil {
				t.Fatalf("ruleset %d: %v\n%s", rs, err, xt[v6])
			}
		}
		native += "--- iptables:\n" + xt[false] + "--- ip6tables:\n" + xt[true]
		snap, err := filtertest.Read(tp.rtr)
		if err != nil {
			t.Fatal(err)
		}
		var pkts []eval.Packet
		for range diffPackets {
			p := (&gen{r: r, v6: r.IntN(2) == 0}).packet(tp)
			p.SrcMaybeLocal, p.DstMaybeLocal = eval.MaybeLocal(p.Src, local), eval.MaybeLocal(p.Dst, local)
			pkts = append(pkts, p)
			res := eval.Evaluate(snap.Ruleset(p.Family), snap.Sets, p)
			if res.Verdict == eval.Linux && !p.DstMaybeLocal {
				t.Errorf("ruleset %d: %s: Linux (%s), though no local route covers its addresses\n%s", rs, p, res.Reason, native)
			}
			if res.Verdict == eval.Drop && res.Rule != nil && slices.ContainsFunc(res.Rule.Matches, func(m model.Match) bool { _, ok := m.(model.FibLocal); return ok }) {
				byFib++
				if res.Chain.IPTables {
					byXT++
				}
			}
		}
		c, bad := tp.exchange(t, snap, pkts, func(p eval.Packet, res eval.Result, arrived bool) {
			t.Errorf("ruleset %d: %s: evaluator says %s (%s) but the packet %s\n%s",
				rs, p, res.Verdict, res.Reason, map[bool]string{true: "arrived", false: "did not arrive"}[arrived], native)
		})
		mismatches += bad
		for v, n := range c {
			counts[v] += n
		}
	}
	t.Logf("accept %d, drop %d (%d by a rule with a fib or addrtype LOCAL match, %d of them addrtype), linux %d; %d mismatches",
		counts[eval.Accept], counts[eval.Drop], byFib, byXT, counts[eval.Linux], mismatches)
	if !covered() {
		t.Errorf("every outcome must be exercised: accept %d, drop by a fib rule %d, by an addrtype rule %d, linux %d", counts[eval.Accept], byFib-byXT, byXT, counts[eval.Linux])
	}
}
