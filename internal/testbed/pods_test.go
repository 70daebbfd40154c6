package testbed

import (
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// The pods topology carries TCP between pods of one node (through cni0) and of two nodes
// (through flannel.1 and the underlay) with plain Linux, is configured as Flannel and the CNI
// bridge plugin configure a node, and leaves nothing behind.
func TestPods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	p, err := NewPods("lfp-test-pods", PodsOptions{Pods: [2]int{2, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ns := range p.Namespaces() {
		names = append(names, ns.Name)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			p.Close()
		}
	})
	if len(names) != 6 {
		t.Fatalf("namespaces %v, want 2 nodes and 4 pods", names)
	}
	n1, n2 := p.Nodes[0], p.Nodes[1]
	a, b, c := n1.Pods[0], n1.Pods[1], n2.Pods[0]
	for _, pod := range []*Pod{a, b, c} {
		if !pod.Node.Subnet.Contains(pod.IP) || pod.IP == pod.Node.Gateway {
			t.Errorf("pod %s on node%d (subnet %s)", pod.IP, pod.Node.Index, pod.Node.Subnet)
		}
	}
	if a.IP != netip.MustParseAddr("198.19.1.2") || b.IP != netip.MustParseAddr("198.19.1.3") {
		t.Errorf("host-local order: pods %s, %s", a.IP, b.IP)
	}

	// What the plugins configured.
	want := map[*nsutil.NS][]struct{ cmd, has string }{
		n1.NS: {
			{"ip -d link show flannel.1", "vxlan id 1 local 198.18.0.1 dev eth0"},
			{"ip -d link show flannel.1", "dstport 8472 nolearning"},
			{"ip -d link show flannel.1", "mtu 1450"},
			{"ip route show 198.19.2.0/24", "198.19.2.0/24 via 198.19.2.0 dev flannel.1 onlink"},
			{"ip neigh show dev flannel.1", "198.19.2.0 lladdr " + n2.FlannelMAC.String() + " PERMANENT"},
			{"bridge fdb show dev flannel.1", n2.FlannelMAC.String() + " dst 198.18.0.2 self permanent"},
			{"ip -d link show " + a.HostVeth, "master cni0"},
			{"ip -d link show " + a.HostVeth, "hairpin on"},
			{"ip -d link show cni0", "mtu 1450"},
			{"ip addr show cni0", "inet 198.19.1.1/24"},
			{"iptables -t nat -S FLANNEL-POSTRTG", "-A FLANNEL-POSTRTG -s 198.19.1.0/24 -d 198.19.0.0/16 -m comment --comment \"flanneld masq\" -j RETURN"},
			{"iptables -t nat -S FLANNEL-POSTRTG", "-j MASQUERADE --random-fully"},
			{"iptables -t nat -S POSTROUTING", "-j FLANNEL-POSTRTG"},
			{"iptables -S FLANNEL-FWD", "-A FLANNEL-FWD -s 198.19.0.0/16 -m comment --comment \"flanneld forward\" -j ACCEPT"},
			{"iptables -S FORWARD", "-j FLANNEL-FWD"},
			{"sysctl -n net.ipv4.ip_forward", "1"},
			{"sysctl -n net.bridge.bridge-nf-call-iptables", "1"},
		},
		a.NS: {
			{"ip route show", "default via 198.19.1.1 dev eth0"},
			{"ip route show", "198.19.0.0/16 via 198.19.1.1 dev eth0"},
			{"ip link show eth0", "mtu 1450"},
		},
	}
	for ns, checks := range want {
		for _, c := range checks {
			out, err := ns.Run(strings.Fields(c.cmd)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, c.has) {
				t.Errorf("%s: %q lacks %q:\n%s", ns.Name, c.cmd, c.has, out)
			}
		}
	}

	// TCP between pods: a to b on node1, a to c on node2, and back over the same connections.
	tcpExchange(t, a, b)
	tcpExchange(t, a, c)
	tcpExchange(t, c, b)

	// A pod added later is reachable too, and a removed one leaves no port on cni0.
	d, err := p.AddPod(2)
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, d.NS.Name)
	tcpExchange(t, b, d)
	if err := p.RemovePod(d); err != nil {
		t.Fatal(err)
	}
	if out, _ := n2.NS.Run("ip", "link", "show", d.HostVeth); !strings.Contains(out, "does not exist") {
		t.Errorf("%s is still on node2 after RemovePod: %s", d.HostVeth, out)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && slices.Contains(names, f[0]) {
			t.Errorf("namespace %s left after Close", f[0])
		}
	}
}

// tcpExchange connects from pod from to a server in pod to and exchanges a few bytes each way.
func tcpExchange(t *testing.T, from, to *Pod) {
	t.Helper()
	addr := netip.AddrPortFrom(to.IP, 7777).String()
	var ln net.Listener
	if err := to.NS.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			peer <- err.Error()
			return
		}
		defer c.Close()
		peer <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		io.Copy(c, c)
	}()
	var c net.Conn
	err := from.NS.Do(func() (err error) {
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("%s -> %s: %v", from.IP, addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte("linuxfp pods: " + from.IP.String() + " -> " + to.IP.String())
	for range 3 {
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("%s -> %s: %v", from.IP, addr, err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != string(msg) {
			t.Fatalf("%s -> %s: echoed %q, %v", from.IP, addr, got, err)
		}
	}
	// The server saw the pod's own address: nothing is masqueraded between pods.
	if got := <-peer; got != from.IP.String() {
		t.Errorf("%s -> %s: the server saw a connection from %s", from.IP, addr, got)
	}
}

// The ceiling's pairs carry TCP over their one veth, and go away.
func TestDirectPods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	d, err := NewDirectPods("lfp-test-pods", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if len(d.Pairs) != 2 || d.Pairs[1][0].IP != netip.MustParseAddr("198.18.101.1") || d.Pairs[1][1].IP != netip.MustParseAddr("198.18.101.2") {
		t.Fatalf("pairs %+v", d.Pairs)
	}
	for _, pair := range d.Pairs {
		tcpExchange(t, pair[0], pair[1])
	}
	if out, err := d.Pairs[0][0].NS.Run("ip", "link", "show", "eth0"); err != nil || !strings.Contains(out, "mtu 1450") {
		t.Errorf("eth0: %s (%v)", out, err)
	}
	names := []string{}
	for _, pair := range d.Pairs {
		names = append(names, pair[0].NS.Name, pair[1].NS.Name)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s left after Close", n)
		}
	}
}
