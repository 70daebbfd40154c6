package eval_test

// Rulesets shaped like those Docker, the CNI plugins (bridge, firewall, portmap), Flannel and
// kube-proxy install (testdata/*.v4, *.v6, re-addressed into 198.18.0.0/15 and 2001:2::/48) must
// load, read back with every rule in place and every unsupported part Unknown, and be evaluated
// without a wrong verdict: hand-picked packets have the verdict worked out by hand, and they and
// random packets go through the router namespace to check the evaluator against Linux.

import (
	"bufio"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/filter/eval"
	"github.com/linuxfp/linuxfp/internal/filter/filtertest"
	"github.com/linuxfp/linuxfp/internal/filter/model"
	"github.com/linuxfp/linuxfp/internal/filter/nft"
)

type shapeRule struct {
	family model.Family
	chain  string // "ip filter KUBE-FORWARD"
	pos    int
	want   string // substring of the rule's rendering
}

type shapePacket struct {
	what string
	p    eval.Packet
	want eval.Verdict
}

type shape struct {
	name   string
	devs   [4]string // router devices: two client side, two server side (see newTopo)
	nfacct []string
	rules  []shapeRule
	pkts   []shapePacket
}

func udp(src, dst, in string, sport, dport uint16) eval.Packet {
	return l4(model.ProtoUDP, src, dst, in, sport, dport)
}

// newUDP is a UDP datagram conntrack gives the state NEW: the harness flushes conntrack and sends
// nothing back.
func newUDP(src, dst, in string, sport, dport uint16) eval.Packet {
	p := udp(src, dst, in, sport, dport)
	p.CtState = model.CtNew
	return p
}

func tcp(src, dst, in string, sport, dport uint16) eval.Packet {
	return l4(model.ProtoTCP, src, dst, in, sport, dport)
}

func l4(proto uint8, src, dst, in string, sport, dport uint16) eval.Packet {
	p := eval.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: proto, In: in, SrcPort: sport, DstPort: dport}
	p.Family = model.IPv4
	if p.Src.Is6() {
		p.Family = model.IPv6
	}
	return p
}

var shapes = []shape{
	{
		name: "docker",
		devs: [4]string{"eth0", "docker0", "ens5", "br-5f3a9e1c2b7d"},
		rules: []shapeRule{
			{model.IPv4, "ip nat PREROUTING", 0, "-m addrtype --dst-type LOCAL => jump DOCKER"},
			{model.IPv4, "ip nat POSTROUTING", 1, "! -o docker0 -s 198.18.1.0/24 => linux (MASQUERADE translates the packet)"},
			{model.IPv4, "ip nat DOCKER", 2, "=> linux (DNAT translates the packet)"},
			{model.IPv4, "ip filter FORWARD", 2, "-o br-5f3a9e1c2b7d -m conntrack --ctstate RELATED,ESTABLISHED => accept"},
			{model.IPv4, "ip filter DOCKER-ISOLATION-STAGE-2", 1, "-o docker0 => drop"},
			{model.IPv6, "ip6 filter DOCKER-ISOLATION-STAGE-1", 0, "-i docker0 ! -o docker0 => jump DOCKER-ISOLATION-STAGE-2"},
		},
		pkts: []shapePacket{
			{"container to the outside: masqueraded", udp("198.18.1.20", "198.19.0.5", "docker0", 1000, 53), eval.Linux},
			{"container to another docker network: isolated", tcp("198.18.1.20", "198.19.128.5", "docker0", 1000, 80), eval.Drop},
			{"outside to outside: FORWARD policy", udp("198.18.0.10", "198.19.0.5", "eth0", 1000, 53), eval.Drop},
			{"outside to a published container: conntrack rule first", tcp("198.18.0.10", "198.19.128.5", "eth0", 1000, 80), eval.Linux},
			{"outside to a host port: DNAT", tcp("198.18.0.10", "198.19.128.6", "eth0", 1000, 8080), eval.Linux},
			{"ipv6 container to the outside: masqueraded", udp("2001:2:0:1::20", "2001:2:0:f100::5", "docker0", 1000, 53), eval.Linux},
			{"ipv6 outside to outside: FORWARD policy", udp("2001:2::10", "2001:2:0:f100::5", "eth0", 1000, 53), eval.Drop},
		},
	},
	{
		name: "cni",
		devs: [4]string{"eth0", "cni0", "eth1", "mynet2"},
		rules: []shapeRule{
			{model.IPv4, "ip filter CNI-FORWARD", 1, "-d 198.18.1.20/32 -m conntrack --ctstate RELATED,ESTABLISHED => accept"},
			{model.IPv4, "ip nat CNI-HOSTPORT-DNAT", 0, "-p tcp --dport 8080 => jump CNI-DN-a1b2c3d4e5f60718293a4"},
			{model.IPv4, "ip nat CNI-HOSTPORT-MASQ", 0, "-m mark --mark 0x2000/0x2000 => linux (MASQUERADE translates the packet)"},
			{model.IPv4, "ip nat CNI-HOSTPORT-SETMARK", 0, "=> linux (target MARK)"},
			{model.IPv6, "ip6 nat CNI-DN-a1b2c3d4e5f60718293a4", 1, "-p tcp --dport 8080 => linux (DNAT translates the packet)"},
		},
		pkts: []shapePacket{
			{"pod with firewall rules to the outside: masqueraded", udp("198.18.1.20", "198.19.0.5", "cni0", 1000, 53), eval.Linux},
			{"address without CNI rules passes", udp("198.18.1.21", "198.19.0.5", "cni0", 1000, 53), eval.Accept},
			{"to a pod: conntrack rule", tcp("198.18.0.10", "198.19.128.5", "eth0", 1000, 80), eval.Linux},
			{"to a host port of a forwarded address: the portmap DNAT is for local addresses", tcp("198.18.0.10", "198.19.128.6", "eth0", 1000, 8080), eval.Accept},
			{"ipv6 address without CNI rules passes", udp("2001:2:0:1::21", "2001:2:0:f100::5", "cni0", 1000, 53), eval.Accept},
		},
	},
	{
		name: "flannel",
		devs: [4]string{"eth0", "cni0", "eth1", "flannel.1"},
		rules: []shapeRule{
			{model.IPv4, "ip nat FLANNEL-POSTRTG", 0, "-m mark --mark 0x4000/0x4000 => return"},
			{model.IPv4, "ip nat FLANNEL-POSTRTG", 4, "-s 198.18.0.0/15 ! -d 224.0.0.0/4 => linux (MASQUERADE translates the packet)"},
			{model.IPv4, "ip filter FLANNEL-FWD", 0, "-s 198.18.0.0/15 => accept"},
			{model.IPv6, "ip6 filter FLANNEL-FWD", 1, "-d 2001:2::/46 => accept"},
		},
		pkts: []shapePacket{
			{"pod to remote pod", udp("198.18.1.20", "198.19.128.5", "cni0", 1000, 53), eval.Accept},
			{"pod to the outside: masqueraded", udp("198.18.0.10", "198.19.0.5", "eth0", 1000, 53), eval.Linux},
			{"ipv6 pod to remote pod", tcp("2001:2:0:1::20", "2001:2:0:f200::5", "cni0", 1000, 80), eval.Accept},
		},
	},
	{
		name: "ufw",
		devs: [4]string{"eth0", "wlan0", "eth1", "lxdbr0"},
		rules: []shapeRule{
			{model.IPv4, "ip filter ufw-before-forward", 0, "-m conntrack --ctstate RELATED,ESTABLISHED => accept"},
			{model.IPv4, "ip filter ufw-after-logging-forward", 0, "unknown(limit, stateful) => linux (target LOG)"},
			{model.IPv4, "ip filter ufw-user-forward", 1, "-d 198.19.0.0/24 => drop"},
			{model.IPv6, "ip6 filter ufw6-before-forward", 0, "-m conntrack --ctstate RELATED,ESTABLISHED => accept"},
		},
		pkts: []shapePacket{
			{"wlan0 to a network ufw denies: dropped", newUDP("198.18.0.10", "198.19.0.5", "wlan0", 1000, 53), eval.Drop},
			{"a flow ufw does not allow: logged by Linux, then the policy", newUDP("198.18.0.10", "198.19.0.5", "eth0", 1000, 53), eval.Linux},
			{"ipv6, a flow ufw does not allow", newUDP("2001:2::10", "2001:2:0:f100::5", "eth0", 1000, 53), eval.Linux},
		},
	},
	{
		name:   "kube-proxy",
		devs:   [4]string{"eth0", "cni0", "eth1", "flannel.1"},
		nfacct: []string{"ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts"},
		rules: []shapeRule{
			{model.IPv4, "ip filter KUBE-FORWARD", 0, "-m conntrack --ctstate INVALID unknown(xt match nfacct rev 1, stateful) => drop"},
			{model.IPv4, "ip filter KUBE-FORWARD", 1, "-m mark --mark 0x4000/0x4000 => accept"},
			{model.IPv4, "ip filter KUBE-SERVICES", 0, "=> linux (target REJECT)"},
			{model.IPv4, "ip nat KUBE-SVC-TCOU7JCQXEZGVUNU", 1, "unknown(xt match statistic --mode random) => jump KUBE-SEP-2ZRA5UJD2DOJBYCP"},
			{model.IPv4, "ip nat KUBE-SEP-2ZRA5UJD2DOJBYCP", 1, "-p udp => linux (DNAT translates the packet)"},
			{model.IPv4, "ip nat KUBE-MARK-MASQ", 0, "=> linux (target MARK)"},
			{model.IPv4, "ip nat KUBE-POSTROUTING", 0, "-m mark ! --mark 0x4000/0x4000 => return"},
			{model.IPv6, "ip6 nat KUBE-SERVICES", 1, "-m addrtype --dst-type LOCAL => jump KUBE-NODEPORTS"},
		},
		pkts: []shapePacket{
			{"pod to remote pod: the INVALID rule needs conntrack", udp("198.18.1.20", "198.19.128.5", "cni0", 1000, 53), eval.Linux},
			{"to a service: DNAT", udp("198.18.1.20", "198.19.100.1", "cni0", 1000, 53), eval.Linux},
			{"ipv6 to a service: DNAT", udp("2001:2:0:1::20", "2001:2:0:f100::5", "cni0", 1000, 53), eval.Linux},
		},
	},
}

// appendLines counts the -A lines of an iptables-save file per "family table chain", in order.
func appendLines(t *testing.T, path, fam string) map[string]int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := map[string]int{}
	table := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "):
			n[fam+" "+table+" "+strings.Fields(line)[1]]++
		}
	}
	return n
}

func TestShapes(t *testing.T) {
	filtertest.Require(t, "iptables-restore", "ip6tables-restore", "sysctl")
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			tp := newTopo(t, sh.devs[0], sh.devs[1], sh.devs[2], sh.devs[3])
			if err := filtertest.NFAcct(tp.rtr, sh.nfacct...); err != nil {
				t.Fatal(err)
			}
			files := map[model.Family]string{model.IPv4: "testdata/" + sh.name + ".v4", model.IPv6: "testdata/" + sh.name + ".v6"}
			for fam, path := range files {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := filtertest.IPTablesRestore(tp.rtr, fam == model.IPv6, string(b)); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
			}
			snap, err := filtertest.Read(tp.rtr)
			if err != nil {
				t.Fatal(err)
			}
			checkShape(t, sh, snap, files)
			var pkts []eval.Packet
			for _, sp := range sh.pkts {
				p := tp.route(sp.p)
				res := eval.Evaluate(snap.Ruleset(p.Family), snap.Sets, p)
				if res.Verdict != sp.want {
					t.Errorf("%s: %s: got %s (%s), want %s", sp.what, p, res.Verdict, res.Reason, sp.want)
				}
				pkts = append(pkts, p)
			}
			r := rand.New(rand.NewPCG(uint64(len(sh.name)), 7))
			for range 300 {
				pkts = append(pkts, (&gen{r: r, v6: r.IntN(2) == 0}).packet(tp))
			}
			counts, bad := tp.exchange(t, snap, pkts, func(p eval.Packet, res eval.Result, arrived bool) {
				t.Errorf("%s: evaluator says %s (%s) but the packet %s", p, res.Verdict, res.Reason,
					map[bool]string{true: "arrived", false: "did not arrive"}[arrived])
			})
			t.Logf("%s: %d packets: accept %d, drop %d, linux %d; %d mismatches", sh.name, len(pkts),
				counts[eval.Accept], counts[eval.Drop], counts[eval.Linux], bad)
		})
	}
}

// checkShape: every rule of the forward path's chains is in the model, in order, and the rules
// named in the shape read as expected.
func checkShape(t *testing.T, sh shape, snap *nft.Snapshot, files map[model.Family]string) {
	t.Helper()
	for fam, path := range files {
		rs := snap.Ruleset(fam)
		famName := map[model.Family]string{model.IPv4: "ip", model.IPv6: "ip6"}[fam]
		for key, n := range appendLines(t, path, famName) {
			f := strings.Fields(key)
			c := rs.Chains[model.ChainKey{TableFamily: f[0], Table: f[1], Chain: f[2]}]
			if f[2] == "INPUT" || f[2] == "OUTPUT" {
				if c != nil {
					t.Errorf("%s: chain %s is not on the forward path but in the model", path, key)
				}
				continue
			}
			if c == nil {
				t.Errorf("%s: chain %s missing from the model", path, key)
				continue
			}
			if len(c.Rules) != n {
				t.Errorf("%s: chain %s has %d rules in the model, %d in the file", path, key, len(c.Rules), n)
			}
			for i, r := range c.Rules {
				if r.ID.Position != i {
					t.Errorf("%s: %s rule %d has position %d", path, key, i, r.ID.Position)
				}
			}
		}
	}
	for _, want := range sh.rules {
		f := strings.Fields(want.chain)
		c := snap.Ruleset(want.family).Chains[model.ChainKey{TableFamily: f[0], Table: f[1], Chain: f[2]}]
		if c == nil || want.pos >= len(c.Rules) {
			t.Errorf("%s rule %d: missing", want.chain, want.pos)
			continue
		}
		if got := c.Rules[want.pos].String(); !strings.Contains(got, want.want) {
			t.Errorf("%s rule %d:\n got %s\nwant %s", want.chain, want.pos, got, want.want)
		}
	}
}
