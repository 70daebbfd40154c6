package e2e

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The kube node topology: one Kubernetes node running kube-proxy (iptables mode) in front of
// pods on its CNI bridge, a client outside the cluster that reaches the services' cluster IPs
// (routed to the node, as where the service CIDR is announced) and the node's NodePorts, and a
// second node whose pods are remote endpoints, reached over a direct link with a route per
// node's pod subnet (host-gw style routing, as Flannel's host-gw backend or Calico in BGP mode
// set it up):
//
//	client eth0 198.18.0.2/24 <-> in0 198.18.0.1/24 [node] out0 198.18.1.1/24 <-> eth0 198.18.1.2/24 [node2]
//	                                cni0 198.19.1.1/24                            lo 198.19.2.k/32 (remote endpoints)
//	            vethXXXXXXXX --veth-- eth0 198.19.1.k  pod k (k = 2 ..)
//
// The node is prepared as kubeadm and kube-proxy leave it (ip_forward, bridge-nf-call-iptables,
// route_localnet, kube-proxy's conntrack timeouts); pods are plugged in with the commands of the
// CNI bridge plugin (bridge cni0, isGateway, isDefaultGateway, hairpin, host-local addresses), with
// checksums left to offload as containers' stacks do. The client and node2 stand for hosts behind
// NICs: with xdp they compute their checksums (tx checksum offload off), so linuxfp picks native
// XDP on in0 and out0; without it, tc. IPv6 is off in every namespace: these tests are about IPv4
// services, and IPv6's own neighbour and router discovery would be noise in the counters.
//
// newKubeNodeDualStack builds the node dual-stack instead (IPv6 on, beside the same IPv4):
//
//	client eth0 2001:2::2/64 <-> in0 2001:2::1/64 [node] out0 2001:2:0:1::1/64 <-> eth0 2001:2:0:1::2/64 [node2]
//	                              cni0 2001:2:0:101::1/64                       lo 2001:2:0:102::k/128
//	            pod k eth0 2001:2:0:101::k (k = 2 ..)
//
// with IPv6 forwarding on in the node, routes as for IPv4, and no duplicate address detection or
// router solicitations. Its IPv6 neighbours stay REACHABLE for an hour, so that fewer neighbour
// probes (ICMPv6, which enter the node as packets for Linux: see kubeCounters.linux) cross the
// tests.
//
// Every backend (a pod, or an address of node2) runs an identity server: it answers each TCP
// message and UDP datagram with its own address, the peer address it saw (after the node's NAT)
// and the message itself (on a dual-stack node, on its IPv6 address too).

var (
	kubeClientIP   = netip.MustParseAddr("198.18.0.2")
	kubeNodeInIP   = netip.MustParseAddr("198.18.0.1")
	kubeNodeOutIP  = netip.MustParseAddr("198.18.1.1")
	kubeNode2IP    = netip.MustParseAddr("198.18.1.2")
	kubeGatewayIP  = netip.MustParseAddr("198.19.1.1") // cni0's, the local pods' gateway
	kubeClusterNet = netip.MustParsePrefix("198.19.0.0/16")
)

// Backend ports: every backend serves TCP on kubeTCPPort and UDP on kubeUDPPort.
const (
	kubeTCPPort = 8080
	kubeUDPPort = 8053
)

// kubeServiceIP is the i-th cluster IP (the service CIDR is 198.18.128.0/17).
func kubeServiceIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 128, byte(i)}) }

// kubeRemoteIP is node2's k-th remote endpoint address (198.19.2.k+1).
func kubeRemoteIP(k int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, 2, byte(k + 1)}) }

// The dual-stack node's IPv6 addresses (newKubeNodeDualStack).
var (
	kubeClientIP6   = netip.MustParseAddr("2001:2::2")
	kubeNodeInIP6   = netip.MustParseAddr("2001:2::1")
	kubeNodeOutIP6  = netip.MustParseAddr("2001:2:0:1::1")
	kubeNode2IP6    = netip.MustParseAddr("2001:2:0:1::2")
	kubeGatewayIP6  = netip.MustParseAddr("2001:2:0:101::1")
	kubeClusterNet6 = netip.MustParsePrefix("2001:2:0:100::/56")
	kubeServiceNet6 = netip.MustParsePrefix("2001:2:0:80::/112")
)

// kubeIP6 is the address of prefix whose last 16 bits are n.
func kubeIP6(prefix string, n int) netip.Addr {
	b := netip.MustParseAddr(prefix).As16()
	b[14], b[15] = byte(n>>8), byte(n)
	return netip.AddrFrom16(b)
}

// kubeServiceIP6 is the i-th IPv6 cluster IP (in kubeServiceNet6); kubeRemoteIP6 node2's k-th
// IPv6 remote endpoint (2001:2:0:102::k+1); kubePodIP6 the IPv6 address of the pod at ip (the
// same host number in cni0's 2001:2:0:101::/64).
func kubeServiceIP6(i int) netip.Addr     { return kubeIP6("2001:2:0:80::", i) }
func kubeRemoteIP6(k int) netip.Addr      { return kubeIP6("2001:2:0:102::", k+1) }
func kubePodIP6(ip netip.Addr) netip.Addr { return kubeIP6("2001:2:0:101::", int(ip.As4()[3])) }

type kubeNode struct {
	Client, Node, Node2 *nsutil.NS
	Pods                []*kubePod
	Remotes             []netip.Addr
	// Remotes6: the remote endpoints' IPv6 addresses, in the order of Remotes (dual-stack).
	Remotes6 []netip.Addr
	hook     string
	prefix   string // of the namespaces' names
	dual     bool   // newKubeNodeDualStack

	mu     sync.Mutex
	kube   testbed.KubeProxy // what the last sync loaded
	synced bool
	// ctLog, when set, also records the syncs' conntrack deletions.
	ctLog *ctEventLog
}

// kubePod is a pod on the node, plugged into cni0.
type kubePod struct {
	NS       *nsutil.NS
	IP       netip.Addr
	IP6      netip.Addr // on a dual-stack node
	HostVeth string
}

// newKubeNode builds the topology with pods local pods and remotes remote endpoint addresses,
// each with an identity server; it is removed at the end of the test.
func newKubeNode(t *testing.T, hook string, pods, remotes int) *kubeNode {
	t.Helper()
	return newKubeNodeNamed(t, nsPrefix+"-kp-", hook, pods, remotes)
}

// newKubeNodeNamed is newKubeNode with the namespaces' names starting with prefix.
func newKubeNodeNamed(t *testing.T, prefix, hook string, pods, remotes int) *kubeNode {
	t.Helper()
	return buildKubeNode(t, &kubeNode{hook: hook, prefix: prefix}, pods, remotes)
}

// newKubeNodeDualStack is newKubeNodeNamed with the node dual-stack (see above).
func newKubeNodeDualStack(t *testing.T, prefix, hook string, pods, remotes int) *kubeNode {
	t.Helper()
	return buildKubeNode(t, &kubeNode{hook: hook, prefix: prefix, dual: true}, pods, remotes)
}

// noNUD6 is the script that keeps the IPv6 neighbours of devs reachable for an hour (see the
// dual-stack topology above).
func noNUD6(devs ...string) string {
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "\nsysctl -qw net.ipv6.neigh.%s.base_reachable_time_ms=3600000", d)
	}
	return b.String()
}

// ipv6Sysctls is what a namespace of the topology gets first: IPv6 off, or on a dual-stack node
// without duplicate address detection and router solicitations.
func (k *kubeNode) ipv6Sysctls() string {
	if !k.dual {
		return "sysctl -qw net.ipv6.conf.all.disable_ipv6=1\nsysctl -qw net.ipv6.conf.default.disable_ipv6=1"
	}
	return `sysctl -qw net.ipv6.conf.all.accept_dad=0
sysctl -qw net.ipv6.conf.default.accept_dad=0
sysctl -qw net.ipv6.conf.all.router_solicitations=0
sysctl -qw net.ipv6.conf.default.router_solicitations=0`
}

func buildKubeNode(t *testing.T, k *kubeNode, pods, remotes int) *kubeNode {
	t.Helper()
	requireTool(t, "iptables-restore")
	prefix, hook := k.prefix, k.hook
	t.Cleanup(func() {
		var errs []error
		for _, p := range k.Pods {
			errs = append(errs, p.NS.Close())
		}
		for _, ns := range []*nsutil.NS{k.Client, k.Node, k.Node2} {
			if ns != nil {
				errs = append(errs, ns.Close())
			}
		}
		if err := errors.Join(errs...); err != nil {
			t.Error(err)
		}
	})
	var err error
	for _, x := range []struct {
		ns   **nsutil.NS
		name string
	}{{&k.Client, "client"}, {&k.Node, "node"}, {&k.Node2, "node2"}} {
		if *x.ns, err = nsutil.New(prefix + x.name); err != nil {
			t.Fatal(err)
		}
		sh(t, *x.ns, k.ipv6Sysctls())
	}
	sh(t, k.Client, "ip link add eth0 type veth peer name in0 netns "+k.Node.Name)
	sh(t, k.Node2, "ip link add eth0 type veth peer name out0 netns "+k.Node.Name)
	// kubeadm's preflight wants forwarding and bridged traffic through iptables; kube-proxy sets
	// route_localnet (NodePorts on 127.0.0.1) and its conntrack timeouts.
	sh(t, k.Node, `sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1
sysctl -qw net.ipv4.conf.all.route_localnet=1
sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_established=86400
sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_close_wait=3600
ip addr add 198.18.0.1/24 dev in0
ip addr add 198.18.1.1/24 dev out0
ip link set in0 up
ip link set out0 up
ethtool -K in0 gro on
ethtool -K out0 gro on
ip route add 198.19.2.0/24 via 198.18.1.2`)
	sh(t, k.Client, `ip addr add 198.18.0.2/24 dev eth0
ip link set eth0 up
ip route add default via 198.18.0.1
ethtool -K eth0 gro on`)
	script := `ip addr add 198.18.1.2/24 dev eth0
ip link set eth0 up
ip route add 198.19.1.0/24 via 198.18.1.1
ethtool -K eth0 gro on`
	for i := range remotes {
		k.Remotes = append(k.Remotes, kubeRemoteIP(i+1))
		script += fmt.Sprintf("\nip addr add %s/32 dev lo", kubeRemoteIP(i+1))
	}
	sh(t, k.Node2, script)
	if k.dual {
		sh(t, k.Node, `sysctl -qw net.ipv6.conf.all.forwarding=1
sysctl -qw net.bridge.bridge-nf-call-ip6tables=1
ip -6 addr add 2001:2::1/64 dev in0 nodad
ip -6 addr add 2001:2:0:1::1/64 dev out0 nodad
ip -6 route add 2001:2:0:102::/64 via 2001:2:0:1::2`+noNUD6("in0", "out0"))
		sh(t, k.Client, `ip -6 addr add 2001:2::2/64 dev eth0 nodad
ip -6 route add default via 2001:2::1`+noNUD6("eth0"))
		script := `ip -6 addr add 2001:2:0:1::2/64 dev eth0 nodad
ip -6 route add 2001:2:0:101::/64 via 2001:2:0:1::1` + noNUD6("eth0")
		for i := range remotes {
			k.Remotes6 = append(k.Remotes6, kubeRemoteIP6(i+1))
			script += fmt.Sprintf("\nip -6 addr add %s/128 dev lo", kubeRemoteIP6(i+1))
		}
		sh(t, k.Node2, script)
	}
	if hook == "xdp" {
		sh(t, k.Client, "ethtool -K eth0 tx off")
		sh(t, k.Node2, "ethtool -K eth0 tx off")
	}
	for range pods {
		k.addPod(t)
	}
	// Neighbours resolved the ordinary way.
	var pings []string
	for _, p := range k.Pods {
		pings = append(pings, "ping -c 1 -W 2 "+p.IP.String())
	}
	sh(t, k.Node, "ping -c 1 -W 2 198.18.0.2\nping -c 1 -W 2 198.18.1.2\n"+strings.Join(pings, "\n"))
	sh(t, k.Client, "ping -c 1 -W 2 198.18.0.1")
	sh(t, k.Node2, "ping -c 1 -W 2 198.18.1.1")
	for _, p := range k.Pods {
		sh(t, p.NS, "ping -c 1 -W 2 198.19.1.1")
		serveIdentity(t, p.NS, p.IP)
	}
	for _, a := range k.Remotes {
		serveIdentity(t, k.Node2, a)
	}
	if k.dual {
		pings = []string{"ping -c 1 -W 2 2001:2::2", "ping -c 1 -W 2 2001:2:0:1::2"}
		for _, p := range k.Pods {
			pings = append(pings, "ping -c 1 -W 2 "+p.IP6.String())
		}
		sh(t, k.Node, strings.Join(pings, "\n"))
		sh(t, k.Client, "ping -c 1 -W 2 2001:2::1")
		sh(t, k.Node2, "ping -c 1 -W 2 2001:2:0:1::1")
		for _, p := range k.Pods {
			sh(t, p.NS, "ping -c 1 -W 2 2001:2:0:101::1")
			serveIdentity(t, p.NS, p.IP6)
		}
		for _, a := range k.Remotes6 {
			serveIdentity(t, k.Node2, a)
		}
	}
	return k
}

// addPod plugs a pod in as the CNI bridge plugin's ADD does (see testbed.Pods.AddPod, whose
// commands these are, with the plugin's default MTU): cni0 created once, the veth pair, the host
// end up, enslaved with hairpin on, the pod's address and routes, the gateway address on cni0.
func (k *kubeNode) addPod(t *testing.T) *kubePod {
	t.Helper()
	n := len(k.Pods) + 2
	ns, err := nsutil.New(fmt.Sprintf("%spod%d", k.prefix, n-1))
	if err != nil {
		t.Fatal(err)
	}
	sh(t, ns, k.ipv6Sysctls())
	var b [4]byte
	rand.Read(b[:])
	p := &kubePod{NS: ns, IP: netip.AddrFrom4([4]byte{198, 19, 1, byte(n)}), HostVeth: "veth" + hex.EncodeToString(b[:])}
	k.Pods = append(k.Pods, p)
	if len(k.Pods) == 1 {
		sh(t, k.Node, "ip link add cni0 type bridge\nip link set cni0 up")
	}
	sh(t, ns, "ip link add eth0 type veth peer name "+p.HostVeth+" netns "+k.Node.Name)
	sh(t, k.Node, fmt.Sprintf(`ip link set %[1]s up
ip link set %[1]s master cni0
bridge link set dev %[1]s hairpin on`, p.HostVeth))
	sh(t, ns, fmt.Sprintf(`sysctl -qw net.ipv4.conf.eth0.arp_notify=1
ip addr add %s/24 dev eth0
ip link set eth0 up
ip route add 198.19.0.0/16 via 198.19.1.1 dev eth0
ip route add default via 198.19.1.1 dev eth0`, p.IP))
	if len(k.Pods) == 1 {
		mac, err := k.Node.Run("cat", "/sys/class/net/cni0/address")
		if err != nil {
			t.Fatal(err)
		}
		sh(t, k.Node, "ip addr add 198.19.1.1/24 dev cni0\nip link set cni0 address "+strings.TrimSpace(mac))
	}
	if k.dual {
		p.IP6 = kubePodIP6(p.IP)
		if len(k.Pods) == 1 {
			sh(t, k.Node, "ip -6 addr add 2001:2:0:101::1/64 dev cni0 nodad"+noNUD6("cni0"))
		}
		sh(t, ns, fmt.Sprintf(`ip -6 addr add %s/64 dev eth0 nodad
ip -6 route add default via 2001:2:0:101::1 dev eth0`, p.IP6)+noNUD6("eth0"))
	}
	eventually(t, 3*time.Second, "bridge port "+p.HostVeth+" up", func() error {
		out, err := k.Node.Run("cat", "/sys/class/net/"+p.HostVeth+"/operstate")
		if err != nil || strings.TrimSpace(out) != "up" {
			return fmt.Errorf("operstate %q (%v)", out, err)
		}
		return nil
	})
	return p
}

// removePod deletes a pod as CNI DEL and the runtime do: its eth0 (and with it the host veth),
// then its namespace. Its identity server's sockets stay open but can no longer be reached.
func (k *kubeNode) removePod(t *testing.T, p *kubePod) {
	t.Helper()
	if _, err := p.NS.Run("ip", "link", "del", "eth0"); err != nil {
		t.Fatal(err)
	}
}

// startLinuxfp runs linuxfp in the node and waits until in0, out0 and every pod's host veth
// have programs at the hooks the topology is for, and the conntrack module runs (for both
// families on a dual-stack node).
func (k *kubeNode) startLinuxfp(t *testing.T) *testbed.Linuxfp {
	t.Helper()
	want := map[string]string{"in0": k.hook, "out0": k.hook}
	for _, p := range k.Pods {
		want[p.HostVeth] = "tc"
	}
	families := []string{"ipv4"}
	if k.dual {
		families = append(families, "ipv6")
	}
	has := func(l []string) bool {
		for _, f := range families {
			if !contains(l, f) {
				return false
			}
		}
		return true
	}
	l, err := testbed.StartLinuxfpIn(k.Node, linuxfpBin, func(st *status.Status) bool {
		got := 0
		for _, it := range st.Interfaces {
			if h, ok := want[it.Name]; ok && it.Program != nil && it.Program.Hook == h && has(it.Program.Families) {
				got++
			}
		}
		return got == len(want) && has(st.Conntrack)
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)
	return l
}

// sync loads kube-proxy's rules for kp as a kube-proxy sync does: iptables-restore --noflush of
// its own chains (each declared, so flushed and rewritten), stale chains of the previous sync
// flushed and deleted (-X); the jumps from the built-in chains are kube-proxy's EnsureRule calls,
// made once (the first sync loads them with the rest: re-loading them would append them again).
// Then, as kube-proxy does for UDP services, the conntrack entries of endpoints that went away
// are deleted (`conntrack -D --orig-dst <cluster IP> --dst-nat <endpoint> -p udp`, and
// `conntrack -D -p udp --dport <node port> --dst-nat <endpoint>`), so their flows pick a new
// endpoint with their next datagram.
func (k *kubeNode) sync(t *testing.T, kp testbed.KubeProxy) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.synced {
		if err := kp.Apply(k.Node); err != nil {
			t.Fatal(err)
		}
		k.kube, k.synced = kp, true
		return
	}
	payload := kubeSyncPayload(k.kube.Rules(), kp.Rules())
	cmd := exec.Command("ip", "netns", "exec", k.Node.Name, "iptables-restore", "-w", "--noflush")
	cmd.Stdin = strings.NewReader(payload)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kube-proxy sync: iptables-restore: %v: %s\n%s", err, out, payload)
	}
	var gone []conntrackMatch
	for _, old := range k.kube.Services {
		if old.Proto != "udp" {
			continue
		}
		var now []netip.AddrPort
		for _, s := range kp.Services {
			if s.Namespace == old.Namespace && s.Name == old.Name && s.PortName == old.PortName {
				now = s.Endpoints
			}
		}
		for _, ep := range old.Endpoints {
			if slices.Contains(now, ep) {
				continue
			}
			gone = append(gone, conntrackMatch{origDst: old.ClusterIP, dstNAT: ep.Addr()})
			if old.NodePort != 0 {
				gone = append(gone, conntrackMatch{origDport: old.NodePort, dstNAT: ep.Addr()})
			}
		}
	}
	if len(gone) > 0 {
		if err := conntrackDeleteUDP(k.Node, gone, k.ctLog); err != nil {
			t.Fatal(err)
		}
	}
	k.kube = kp
}

var builtinChains = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// kubeSyncPayload turns the full rules of a sync (next) into what kube-proxy restores when it
// syncs again after prev: no built-in chains or jumps from them, and the chains prev had that
// next has not declared and deleted at the end of their table.
func kubeSyncPayload(prev, next string) string {
	chains := func(rules string) map[string][]string { // table -> chains declared
		m := map[string][]string{}
		table := ""
		for _, l := range strings.Split(rules, "\n") {
			if strings.HasPrefix(l, "*") {
				table = l[1:]
			} else if strings.HasPrefix(l, ":") {
				m[table] = append(m[table], strings.Fields(l[1:])[0])
			}
		}
		return m
	}
	before, after := chains(prev), chains(next)
	var b strings.Builder
	table := ""
	for _, l := range strings.Split(next, "\n") {
		f := strings.Fields(l)
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":") && slices.Contains(builtinChains, f[0][1:]):
			continue
		case strings.HasPrefix(l, "-A ") && slices.Contains(builtinChains, f[1]):
			continue
		case l == "COMMIT":
			var stale []string
			for _, c := range before[table] {
				if !slices.Contains(after[table], c) && !slices.Contains(builtinChains, c) {
					stale = append(stale, c)
				}
			}
			for _, c := range stale {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c)
			}
			for _, c := range stale {
				fmt.Fprintf(&b, "-X %s\n", c)
			}
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// conntrackMatch selects UDP entries as kube-proxy's `conntrack -D` calls do: the original
// destination address (or port), and the address the destination was translated to.
type conntrackMatch struct {
	origDst   netip.Addr
	origDport uint16
	dstNAT    netip.Addr
}

func conntrackDeleteUDP(ns *nsutil.NS, ms []conntrackMatch, log *ctEventLog) error {
	return ns.Do(func() error {
		c, err := conntrack.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		fs, err := c.Dump(nil)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.TupleOrig.Proto.Protocol != unix.IPPROTO_UDP {
				continue
			}
			for _, m := range ms {
				if f.TupleReply.IP.SourceAddress != m.dstNAT ||
					(m.origDst.IsValid() && f.TupleOrig.IP.DestinationAddress != m.origDst) ||
					(m.origDport != 0 && f.TupleOrig.Proto.DestinationPort != m.origDport) {
					continue
				}
				// ENOENT: it went meanwhile.
				err := c.Delete(f)
				log.add(fmt.Sprintf("deleted by the sync (%v)", err), f)
				if err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("conntrack -D %v: %w", f.TupleOrig, err)
				}
				break
			}
		}
		return nil
	})
}

// flushConntrack empties the node's conntrack table (between a run with Linux alone and one with
// linuxfp).
func (k *kubeNode) flushConntrack(t *testing.T) {
	t.Helper()
	flushConntrack(t, k.Node)
}

// ctFlow finds the node's conntrack entry whose original tuple is proto from src.
func (k *kubeNode) ctFlow(proto uint8, src netip.AddrPort) (conntrack.Flow, error) {
	var found conntrack.Flow
	ok := false
	fs, err := conntrackFlows(k.Node)
	for _, f := range fs {
		o := f.TupleOrig
		if o.Proto.Protocol == proto && o.IP.SourceAddress == src.Addr() && o.Proto.SourcePort == src.Port() {
			found, ok = f, true
		}
	}
	if err == nil && !ok {
		err = fmt.Errorf("no conntrack entry from %s", src)
	}
	return found, err
}

// errKind is an error as the application sees it.
func errKind(err error) string {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF):
		return "closed"
	}
	return err.Error()
}

// waitFastPathReady exchanges a message on each connection until every connection's conntrack
// entry is one the fast path takes (a UDP flow is ASSURED once it has answers 2 s after its first
// datagram).
func (k *kubeNode) waitFastPathReady(t *testing.T, conns []*svcConn) {
	t.Helper()
	eventually(t, 6*time.Second, "every connection's conntrack entry ready for the fast path", func() error {
		var errs []string
		for _, c := range conns {
			if err := c.exchange(1, 1000); err != nil {
				t.Fatal(err)
			}
			if err := k.fastPathReady(c); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
}

// checkEstablished checks the counters c of an interface (iface) where n of connection conn's
// established packets (what: requests or answers) entered: every one forwarded by the fast path
// (the frames Linux's bridge refreshes its FDB entry from count as such), or, where reason is
// not "", forwarded or handed to Linux for that one reason.
func checkEstablished(t *testing.T, conn *svcConn, what, iface string, c kubeCounters, n uint64, reason string) {
	t.Helper()
	if reason == "" && (c.forwarded+c.passed["bridge_refresh"] < n || c.linux() > 0) {
		t.Errorf("%s, established: %d %s forwarded by the fast path at %s, to Linux %v; want all %d forwarded",
			conn, c.forwarded, what, iface, c.passed, n)
	}
	if reason != "" && (c.forwarded+c.passed[reason]+c.passed["bridge_refresh"] < n || c.linux() != c.passed[reason]) {
		t.Errorf("%s, established: %d %s forwarded by the fast path at %s, to Linux %v; want all %d forwarded or to Linux as %s",
			conn, c.forwarded, what, iface, c.passed, n, reason)
	}
}

// fastPathReady reports whether the node's conntrack entry of c is one the fast path takes: a
// TCP connection marked liberal both ways, a UDP flow ASSURED.
func (k *kubeNode) fastPathReady(c *svcConn) error {
	proto := uint8(unix.IPPROTO_TCP)
	if c.udp {
		proto = unix.IPPROTO_UDP
	}
	f, err := k.ctFlow(proto, c.local())
	if err != nil {
		return err
	}
	if c.udp {
		if !f.Status.Assured() {
			return fmt.Errorf("%s: entry not ASSURED yet (status %v)", c, f.Status)
		}
		return nil
	}
	const beLiberal = 0x08
	if tcp := f.ProtoInfo.TCP; tcp == nil || (tcp.OriginalFlags>>8)&beLiberal == 0 || (tcp.ReplyFlags>>8)&beLiberal == 0 {
		return fmt.Errorf("%s: entry not liberal yet (%+v)", c, f.ProtoInfo.TCP)
	}
	return nil
}

// serveIdentity runs the identity servers of backend addr in ns (TCP kubeTCPPort, UDP
// kubeUDPPort) until the end of the test. A TCP message is a 2-byte length and that many bytes;
// the answer is a 2-byte length, the backend's address (4 bytes, IPv6: 16), the peer's address
// and port as the backend saw them (6 bytes, IPv6: 18), a zero byte and the message. A UDP answer
// is the same without the length, and with the TTL (hop limit) the datagram arrived with instead
// of the zero.
func serveIdentity(t *testing.T, ns *nsutil.NS, addr netip.Addr) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := ns.Do(func() (err error) {
		if ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, kubeTCPPort).String()); err != nil {
			return err
		}
		if pc, err = net.ListenPacket("udp", netip.AddrPortFrom(addr, kubeUDPPort).String()); err != nil {
			ln.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	head := func(peer netip.AddrPort) []byte {
		b := addr.AsSlice()
		b = append(b, peer.Addr().Unmap().AsSlice()...)
		return binary.BigEndian.AppendUint16(b, peer.Port())
	}
	udp := pc.(*net.UDPConn)
	if err := recvTTLOn(udp, addr.Is6()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf, oob := make([]byte, 2048), make([]byte, 128)
		for {
			n, oobn, _, from, err := udp.ReadMsgUDPAddrPort(buf, oob)
			if err != nil {
				return
			}
			udp.WriteToUDPAddrPort(append(append(head(from), recvTTL(oob[:oobn])), buf[:n]...), from)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				h := append(head(c.RemoteAddr().(*net.TCPAddr).AddrPort()), 0) // no TTL for a stream
				buf := make([]byte, 2+len(h)+65536)
				for {
					if _, err := io.ReadFull(c, buf[:2]); err != nil {
						return
					}
					n := int(binary.BigEndian.Uint16(buf))
					if _, err := io.ReadFull(c, buf[2+len(h):2+len(h)+n]); err != nil {
						return
					}
					binary.BigEndian.PutUint16(buf, uint16(len(h)+n))
					copy(buf[2:], h)
					if _, err := c.Write(buf[:2+len(h)+n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		pc.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// svcConn is a TCP connection or a connected UDP socket from some namespace to a service's
// address (a cluster IP or a NodePort), exchanging messages with whichever backend it reached.
type svcConn struct {
	name string
	udp  bool
	c    net.Conn
	id   int
	n    int // messages exchanged
	buf  []byte
	// backend and peer: the first answer's backend, and the client address it saw.
	backend netip.Addr
	peer    netip.AddrPort
	// ttl: the TTL the last datagram reached the backend with (UDP); backTTL, the TTL its answer
	// came back with.
	ttl, backTTL byte
	oob          []byte
}

func (c *svcConn) String() string { return c.name }

// addrLen is the length of the addresses in the answers: the connection's family's.
func (c *svcConn) addrLen() int {
	if c.local().Addr().Is6() {
		return 16
	}
	return 4
}

func (c *svcConn) local() netip.AddrPort {
	return netip.MustParseAddrPort(c.c.LocalAddr().String())
}

// dialService connects from ns to dst over proto ("tcp" or "udp"); id makes its messages its own.
func dialService(ns *nsutil.NS, name, proto string, dst netip.AddrPort, id int) (*svcConn, error) {
	c := &svcConn{name: fmt.Sprintf("%s (%s %s)", name, proto, dst), udp: proto == "udp", id: id, buf: make([]byte, 2+35+65536)}
	err := ns.Do(func() (err error) {
		c.c, err = net.DialTimeout(proto, dst.String(), 3*time.Second)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", c.name, err)
	}
	if c.udp {
		c.oob = make([]byte, 128)
		if err := recvTTLOn(c.c.(*net.UDPConn), dst.Addr().Is6()); err != nil {
			c.c.Close()
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return c, nil
}

// recvTTLOn asks for each datagram's TTL (IPv6: hop limit) in its control messages.
func recvTTLOn(c *net.UDPConn, v6 bool) error {
	level, opt, name := unix.IPPROTO_IP, unix.IP_RECVTTL, "IP_RECVTTL"
	if v6 {
		level, opt, name = unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, "IPV6_RECVHOPLIMIT"
	}
	raw, err := c.SyscallConn()
	if err == nil {
		raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), level, opt, 1) })
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// recvTTL is the TTL (hop limit) in a received datagram's control messages (0: none).
func recvTTL(oob []byte) byte {
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if ((m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL) ||
			(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT)) && len(m.Data) >= 4 {
			return byte(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}

// roundTrip sends the next message (1 to maxLen bytes, at most 1400 for UDP) and reads the
// answer within timeout; it returns the backend that answered and the peer it saw. The answer
// must carry the message unaltered (for TCP, as the next bytes of the stream).
func (c *svcConn) roundTrip(maxLen int, timeout time.Duration) (netip.Addr, netip.AddrPort, error) {
	msg := podMessage(c.id, c.n, maxLen)
	c.c.SetDeadline(time.Now().Add(timeout))
	var ans []byte
	if c.udp {
		if _, err := c.c.Write(msg); err != nil {
			return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("message %d: write: %w", c.n, err)
		}
		n, oobn, _, _, err := c.c.(*net.UDPConn).ReadMsgUDPAddrPort(c.buf, c.oob)
		if err != nil {
			return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("message %d: read: %w", c.n, err)
		}
		ans = c.buf[:n]
		c.backTTL = recvTTL(c.oob[:oobn])
	} else {
		out := binary.BigEndian.AppendUint16(nil, uint16(len(msg)))
		if _, err := c.c.Write(append(out, msg...)); err != nil {
			return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("message %d: write: %w", c.n, err)
		}
		if _, err := io.ReadFull(c.c, c.buf[:2]); err != nil {
			return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("message %d: read: %w", c.n, err)
		}
		n := int(binary.BigEndian.Uint16(c.buf))
		if _, err := io.ReadFull(c.c, c.buf[:n]); err != nil {
			return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("message %d: read: %w", c.n, err)
		}
		ans = c.buf[:n]
	}
	a := c.addrLen()
	head := 2*a + 3
	if len(ans) != head+len(msg) || string(ans[head:]) != string(msg) {
		return netip.Addr{}, netip.AddrPort{}, fmt.Errorf("message %d (%d bytes): answer altered (%d bytes)", c.n, len(msg), len(ans))
	}
	c.n++
	backend, _ := netip.AddrFromSlice(ans[:a])
	peerIP, _ := netip.AddrFromSlice(ans[a : 2*a])
	peer := netip.AddrPortFrom(peerIP, binary.BigEndian.Uint16(ans[2*a:]))
	c.ttl = ans[2*a+2]
	if !c.backend.IsValid() {
		c.backend, c.peer = backend, peer
	}
	return backend, peer, nil
}

// exchange makes n round trips that must all reach the connection's first backend, seen from
// the same peer address.
func (c *svcConn) exchange(n, maxLen int) error {
	for range n {
		b, p, err := c.roundTrip(maxLen, 5*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		if b != c.backend || p != c.peer {
			return fmt.Errorf("%s: message %d answered by %s seeing %s; the first by %s seeing %s", c, c.n-1, b, p, c.backend, c.peer)
		}
	}
	return nil
}

func (c *svcConn) close() { c.c.Close() }
