package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// The pods topology is the paper's Kubernetes experiment: two nodes of a Flannel cluster (vxlan
// backend) whose pods are plugged in by the CNI bridge plugin, each node and each pod a network
// namespace of its own:
//
//	pod 198.19.1.k eth0 --veth-- vethXXXXXXXX                     vethXXXXXXXX --veth-- eth0 198.19.2.k pod
//	                               cni0 198.19.1.1/24     cni0 198.19.2.1/24
//	                          flannel.1 198.19.1.0/32     flannel.1 198.19.2.0/32  (VNI 1, UDP 8472)
//	                 node1    eth0 198.18.0.1/24  <---->  eth0 198.18.0.2/24    node2   (veth: the underlay)
//
// Everything is configured with the commands Flannel and the CNI plugins issue, in their order
// (podsNodeScript, flannelRemoteScript, AddPod): flanneld with its default kube-flannel.yml
// configuration (vxlan backend, --ip-masq), and for every pod the flannel CNI plugin delegating to
// the bridge plugin with flannel's default delegate configuration: bridge cni0, isGateway
// (isDefaultGateway), ipMasq false (flanneld masquerades), MTU 1450, hairpinMode, host-local
// IPAM over the node's subnet with a route to the cluster CIDR.

// Addresses of the pods topology.
var (
	// PodsClusterCIDR is the cluster's pod network (Flannel's "Network").
	PodsClusterCIDR = netip.MustParsePrefix("198.19.0.0/16")
)

// PodsMTU is what Flannel's vxlan backend gives flannel.1 and writes into subnet.env for the CNI
// plugin: the underlay's 1500 minus 50 bytes of VXLAN encapsulation.
const PodsMTU = 1450

// FlannelVNI and FlannelPort are the vxlan backend's defaults.
const (
	FlannelVNI  = 1
	FlannelPort = 8472
)

// PodsOptions shape the pods topology.
type PodsOptions struct {
	// Pods is how many pods each node gets when it is built (more can be added with AddPod).
	Pods [2]int
}

// Pods is the two nodes and their pods.
type Pods struct {
	Nodes [2]*PodNode
	mu    sync.Mutex
}

// PodNode is one Kubernetes node.
type PodNode struct {
	NS *nsutil.NS
	// Index is 1 for node1, 2 for node2.
	Index int
	// IP is the node's address on the underlay (eth0): Flannel's public IP and VTEP address.
	IP netip.Addr
	// Subnet is the node's pod subnet (Flannel's lease), Gateway cni0's address in it.
	Subnet  netip.Prefix
	Gateway netip.Addr
	// FlannelMAC is flannel.1's MAC (the VTEP MAC the other node learns from the lease).
	FlannelMAC net.HardwareAddr
	Pods       []*Pod

	prefix string
	next   int // host-local's next address in Subnet
}

// Pod is one pod: its own namespace with eth0, plugged into its node's cni0.
type Pod struct {
	NS   *nsutil.NS
	Node *PodNode
	IP   netip.Addr
	// HostVeth is the host side of the pod's veth, a port of cni0 in the node's namespace.
	HostVeth string
}

// PodSubnet is node n's pod subnet (198.19.n.0/24).
func PodSubnet(n int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(n), 0}), 24)
}

// PodNodeIP is node n's underlay address (198.18.0.n).
func PodNodeIP(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(n)}) }

// NewPods builds the two nodes, Flannel on both and o.Pods pods on each. Names start with prefix
// (use "lfp-..."); Close removes everything, and NewPods removes what it built when it fails.
func NewPods(prefix string, o PodsOptions) (_ *Pods, err error) {
	p := &Pods{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	for i := range p.Nodes {
		n := i + 1
		ns, err := nsutil.New(fmt.Sprintf("%s-node%d", prefix, n))
		if err != nil {
			return nil, err
		}
		sn := PodSubnet(n)
		p.Nodes[i] = &PodNode{NS: ns, Index: n, IP: PodNodeIP(n), Subnet: sn, Gateway: sn.Addr().Next(),
			prefix: prefix, next: 2}
	}
	n1, n2 := p.Nodes[0], p.Nodes[1]
	// The underlay: a link between the two nodes, eth0 on both.
	if _, err := n1.NS.Run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", n2.NS.Name); err != nil {
		return nil, err
	}
	for _, n := range p.Nodes {
		if err := n.NS.BatchScript(podsNodeScript(n)); err != nil {
			return nil, fmt.Errorf("node%d: %w", n.Index, err)
		}
		if err := n.NS.Script(flannelIptablesChains); err != nil {
			return nil, fmt.Errorf("node%d: %w", n.Index, err)
		}
		for _, table := range flannelIptables(n.Subnet) {
			if err := iptablesRestore(n.NS, table); err != nil {
				return nil, fmt.Errorf("node%d: %w", n.Index, err)
			}
		}
		out, err := n.NS.Run("cat", "/sys/class/net/flannel.1/address")
		if err != nil {
			return nil, err
		}
		if n.FlannelMAC, err = net.ParseMAC(strings.TrimSpace(out)); err != nil {
			return nil, fmt.Errorf("node%d: flannel.1's MAC: %w", n.Index, err)
		}
	}
	// Each flanneld learns the other node's lease and adds its route, neighbour and FDB entry.
	for i, n := range p.Nodes {
		if err := n.NS.BatchScript(flannelRemoteScript(p.Nodes[1-i])); err != nil {
			return nil, fmt.Errorf("node%d: %w", n.Index, err)
		}
	}
	for i, n := range p.Nodes {
		for range o.Pods[i] {
			if _, err := p.AddPod(n.Index); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// podsNodeScript prepares a node as Kubernetes requires (forwarding, bridged traffic through
// iptables), brings up its underlay, and runs what flanneld's vxlan backend does when it starts
// (pkg/backend/vxlan: newVXLANDevice, Configure): flannel.1 with the lease's network address as a
// /32, learning off, MTU 50 bytes below the underlay's.
func podsNodeScript(n *PodNode) string {
	return fmt.Sprintf(`
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1
ip addr add %[1]s/24 dev eth0
ip link set eth0 up
ip link add flannel.1 mtu %[3]d type vxlan id %[4]d local %[1]s dev eth0 dstport %[5]d nolearning
sysctl -qw net/ipv6/conf/flannel.1/accept_ra=0
ip addr add %[2]s/32 dev flannel.1
ip link set flannel.1 up
`, n.IP, n.Subnet.Addr(), PodsMTU, FlannelVNI, FlannelPort)
}

// flannelRemoteScript is what flanneld's vxlan backend does for another node's lease
// (pkg/backend/vxlan/vxlan_network.go, handleSubnetEvents, EventAdded), in its order: the
// neighbour entry for the remote flannel.1 (AddARP: NeighSet, permanent), its FDB entry with the
// remote node as VTEP (AddFDB: NeighSet AF_BRIDGE, NTF_SELF, permanent), then the onlink route
// ("done last", so the kernel never ARPs for the gateway).
func flannelRemoteScript(remote *PodNode) string {
	gw := remote.Subnet.Addr()
	return fmt.Sprintf(`
ip neigh replace %[1]s lladdr %[2]s dev flannel.1 nud permanent
bridge fdb replace %[2]s dev flannel.1 dst %[3]s self permanent
ip route replace %[4]s via %[1]s dev flannel.1 onlink
`, gw, remote.FlannelMAC, remote.IP, remote.Subnet)
}

// flannelIptablesChains is flanneld's CreateIP4Chain for its two chains (go-iptables ClearChain:
// create the chain, empty).
const flannelIptablesChains = `
iptables -w -t nat -N FLANNEL-POSTRTG
iptables -w -t filter -N FLANNEL-FWD
`

// flannelIptables is what flanneld (started with --ip-masq, as kube-flannel.yml does) loads with
// `iptables-restore --noflush` for the cluster CIDR and the node's lease: one payload for the
// masquerading rules, then one for the forwarding rules. Copied from flannel-io/flannel,
// pkg/trafficmngr/iptables/iptables.go (masqRules with --random-fully, which this iptables
// supports; forwardRules) and iptables_restore.go (the payload's format).
func flannelIptables(subnet netip.Prefix) []string {
	cluster, pod := PodsClusterCIDR.String(), subnet.String()
	masq := strings.Join([]string{
		`*nat`,
		`-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG`,
		`-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN`,
		`-A FLANNEL-POSTRTG -s ` + pod + ` -d ` + cluster + ` -m comment --comment "flanneld masq" -j RETURN`,
		`-A FLANNEL-POSTRTG -s ` + cluster + ` -d ` + pod + ` -m comment --comment "flanneld masq" -j RETURN`,
		`-A FLANNEL-POSTRTG ! -s ` + cluster + ` -d ` + pod + ` -m comment --comment "flanneld masq" -j RETURN`,
		`-A FLANNEL-POSTRTG -s ` + cluster + ` ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`,
		`-A FLANNEL-POSTRTG ! -s ` + cluster + ` -d ` + cluster + ` -m comment --comment "flanneld masq" -j MASQUERADE --random-fully`,
		`COMMIT`, ``}, "\n")
	fwd := strings.Join([]string{
		`*filter`,
		`-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD`,
		`-A FLANNEL-FWD -s ` + cluster + ` -m comment --comment "flanneld forward" -j ACCEPT`,
		`-A FLANNEL-FWD -d ` + cluster + ` -m comment --comment "flanneld forward" -j ACCEPT`,
		`COMMIT`, ``}, "\n")
	return []string{masq, fwd}
}

func iptablesRestore(ns *nsutil.NS, payload string) error {
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "iptables-restore", "--noflush", "--wait")
	cmd.Stdin = strings.NewReader(payload)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("in %s: iptables-restore --noflush: %w: %s", ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// AddPod adds a pod to node n (1 or 2) as the kubelet's CNI ADD does with flannel's default
// configuration: the flannel plugin delegates to the bridge plugin (bridge cni0, isGateway,
// isDefaultGateway, ipMasq false, MTU 1450, hairpinMode) with host-local IPAM over the node's
// subnet and a route to the cluster CIDR. The commands are the bridge plugin's cmdAdd
// (containernetworking/plugins, plugins/main/bridge/bridge.go) in its order:
//
//   - ensureBridge: cni0 with the MTU (EEXIST ignored), accept_ra off, up;
//   - setupVeth: the veth pair created in the pod with its peer (a random vethXXXXXXXX) in the
//     node, which is brought up (ip.SetupVeth), then enslaved to cni0 with hairpin on;
//   - in the pod: DAD off, arp_notify on, then ipam.ConfigureIface: address, link up, routes (the
//     cluster CIDR from IPAM, then the default route isDefaultGateway adds, both via the gateway);
//   - isGateway: the gateway address on cni0 (ensureAddr, once), cni0's MAC pinned to itself,
//     IPv4 forwarding on;
//   - the host veth is waited for until it is operationally up.
//
// The pod's namespace has loopback up (the CNI loopback plugin's job).
func (p *Pods) AddPod(node int) (*Pod, error) {
	if node < 1 || node > len(p.Nodes) {
		return nil, fmt.Errorf("no node%d", node)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.Nodes[node-1]
	// host-local hands out .2 to .254 in turn (.1 is the gateway), never twice.
	if n.next > 254 {
		return nil, fmt.Errorf("node%d's subnet %s is full", node, n.Subnet)
	}
	a := n.Subnet.Addr().As4()
	a[3] = byte(n.next)
	ip := netip.AddrFrom4(a)
	ns, err := nsutil.New(fmt.Sprintf("%s-n%dp%d", n.prefix, node, n.next-1))
	if err != nil {
		return nil, err
	}
	pod := &Pod{NS: ns, Node: n, IP: ip, HostVeth: randomVethName()}
	if err := p.addPod(pod); err != nil {
		ns.Close()
		// A veth whose pod namespace is gone goes with it; the bridge stays, as with CNI.
		return nil, fmt.Errorf("add pod %s to node%d: %w", ip, node, err)
	}
	n.next++
	n.Pods = append(n.Pods, pod)
	return pod, nil
}

func (p *Pods) addPod(pod *Pod) error {
	n := pod.Node
	exists := false
	if _, err := n.NS.Run("ip", "link", "show", "cni0"); err == nil {
		exists = true
	}
	if !exists {
		if _, err := n.NS.Run("ip", "link", "add", "cni0", "mtu", fmt.Sprint(PodsMTU), "type", "bridge"); err != nil {
			return err
		}
	}
	err := n.NS.BatchScript(`
sysctl -qw net.ipv6.conf.cni0.accept_ra=0
ip link set cni0 up
`)
	if err != nil {
		return err
	}
	mtu := fmt.Sprint(PodsMTU)
	if _, err := pod.NS.Run("ip", "link", "add", "eth0", "mtu", mtu, "type", "veth",
		"peer", "name", pod.HostVeth, "mtu", mtu, "netns", n.NS.Name); err != nil {
		return err
	}
	err = n.NS.BatchScript(fmt.Sprintf(`
ip link set %[1]s up
sysctl -qw net.ipv6.conf.%[1]s.accept_ra=0
ip link set %[1]s master cni0
bridge link set dev %[1]s hairpin on
`, pod.HostVeth))
	if err != nil {
		return err
	}
	err = pod.NS.BatchScript(fmt.Sprintf(`
sysctl -qw net.ipv6.conf.eth0.accept_dad=0
sysctl -qw net.ipv4.conf.eth0.arp_notify=1
ip addr add %[1]s/%[2]d dev eth0
ip link set eth0 up
ip route add %[3]s via %[4]s dev eth0
ip route add default via %[4]s dev eth0
`, pod.IP, n.Subnet.Bits(), PodsClusterCIDR, n.Gateway))
	if err != nil {
		return err
	}
	gw := fmt.Sprintf("%s/%d", n.Gateway, n.Subnet.Bits())
	out, err := n.NS.Run("ip", "-o", "-4", "addr", "show", "dev", "cni0")
	if err != nil {
		return err
	}
	if !strings.Contains(out, " "+gw+" ") {
		if _, err := n.NS.Run("ip", "addr", "add", gw, "dev", "cni0"); err != nil {
			return err
		}
	}
	mac, err := n.NS.Run("cat", "/sys/class/net/cni0/address")
	if err != nil {
		return err
	}
	err = n.NS.BatchScript(fmt.Sprintf(`
ip link set cni0 address %s
sysctl -qw net.ipv4.ip_forward=1
`, strings.TrimSpace(mac)))
	if err != nil {
		return err
	}
	// The bridge plugin's "check bridge port state": retries over 2.5 s.
	for _, d := range []time.Duration{0, 50, 500, 1000, 1000} {
		time.Sleep(d * time.Millisecond)
		up := false
		err := n.NS.Do(func() error {
			l, err := netlink.LinkByName(pod.HostVeth)
			if err != nil {
				return err
			}
			up = l.Attrs().OperState == netlink.OperUp
			return nil
		})
		if err != nil {
			return err
		}
		if up {
			return nil
		}
	}
	return fmt.Errorf("bridge port %s is not up", pod.HostVeth)
}

// RemovePod removes a pod as CNI DEL and the runtime do: the pod's eth0 is deleted (its host
// veth goes with it, and cni0 stays), then its namespace.
func (p *Pods) RemovePod(pod *Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := pod.Node
	for i, q := range n.Pods {
		if q == pod {
			n.Pods = append(n.Pods[:i:i], n.Pods[i+1:]...)
			break
		}
	}
	_, err := pod.NS.Run("ip", "link", "del", "eth0")
	return errors.Join(err, pod.NS.Close())
}

// randomVethName is the CNI's name for a host veth (ip.RandomVethName): "veth" and 4 random
// bytes in hex.
func randomVethName() string {
	var b [4]byte
	rand.Read(b[:])
	return "veth" + hex.EncodeToString(b[:])
}

// Close removes every pod's and node's namespace (and with them every device and rule).
func (p *Pods) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, n := range p.Nodes {
		if n == nil {
			continue
		}
		for _, pod := range n.Pods {
			errs = append(errs, pod.NS.Close())
		}
		n.Pods = nil
		errs = append(errs, n.NS.Close())
	}
	p.Nodes = [2]*PodNode{}
	return errors.Join(errs...)
}

// Namespaces lists every namespace of the topology, nodes first.
func (p *Pods) Namespaces() []*nsutil.NS {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*nsutil.NS
	for _, n := range p.Nodes {
		if n != nil {
			out = append(out, n.NS)
		}
	}
	for _, n := range p.Nodes {
		if n != nil {
			for _, pod := range n.Pods {
				out = append(out, pod.NS)
			}
		}
	}
	return out
}

// DirectPods is pairs of pods joined directly, each pair by one veth pair (eth0 <-> eth0, the
// pods' MTU), with nothing between them: no node, bridge, route or rule. It is the pods
// benchmark's ceiling: what the pods' own stacks cost, which no data path between them can save.
//
//	client k eth0 198.18.(100+k).1/24  <->  eth0 198.18.(100+k).2/24 server k
type DirectPods struct {
	Pairs [][2]*Pod // client, server
}

// NewDirectPods builds n pairs (at most 100). Names start with prefix; Close removes everything,
// and NewDirectPods removes what it built when it fails.
func NewDirectPods(prefix string, n int) (_ *DirectPods, err error) {
	if n > 100 {
		return nil, fmt.Errorf("%d direct pod pairs: at most 100", n)
	}
	d := &DirectPods{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	for k := range n {
		d.Pairs = append(d.Pairs, [2]*Pod{})
		for i, role := range []string{"c", "s"} {
			ns, err := nsutil.New(fmt.Sprintf("%s-d%s%d", prefix, role, k+1))
			if err != nil {
				return nil, err
			}
			d.Pairs[k][i] = &Pod{NS: ns, IP: netip.AddrFrom4([4]byte{198, 18, byte(100 + k), byte(i + 1)})}
		}
		c, s := d.Pairs[k][0], d.Pairs[k][1]
		mtu := fmt.Sprint(PodsMTU)
		if _, err := c.NS.Run("ip", "link", "add", "eth0", "mtu", mtu, "type", "veth",
			"peer", "name", "eth0", "mtu", mtu, "netns", s.NS.Name); err != nil {
			return nil, err
		}
		for _, pod := range d.Pairs[k] {
			if err := pod.NS.BatchScript(fmt.Sprintf("ip addr add %s/24 dev eth0\nip link set eth0 up", pod.IP)); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// Close removes every pod's namespace.
func (d *DirectPods) Close() error {
	var errs []error
	for _, pair := range d.Pairs {
		for _, pod := range pair {
			if pod != nil {
				errs = append(errs, pod.NS.Close())
			}
		}
	}
	d.Pairs = nil
	return errors.Join(errs...)
}
