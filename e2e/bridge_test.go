package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The bridge module follows what brctl, ip link and bridge do to a bridge: learning, moves,
// flushes, STP states, port removal and bridge deletion, and hands Linux what it must see.

const sinkL2 = "198.18.0.3" // the sink, on the bridge's subnet

// bridgeTestbed turns the testbed's DUT into a bridge: in0 and out0 become ports of br0
// (198.18.0.1/24) and the sink moves onto gen's subnet. setup creates and fills the bridge
// (brctl or iproute2, as a person would).
func bridgeTestbed(t *testing.T, o testbed.Options, setup string) *testbed.Testbed {
	t.Helper()
	return bridgeTestbedAs(t, nsPrefix, o, setup)
}

// bridgeTestbedAs is bridgeTestbed with namespaces named after prefix.
func bridgeTestbedAs(t *testing.T, prefix string, o testbed.Options, setup string) *testbed.Testbed {
	t.Helper()
	tb := newTestbedAs(t, prefix, o)
	sh(t, tb.DUT, `ip route flush table main proto static
ip addr flush dev in0
ip addr flush dev out0
`+setup+`
ip link set br0 up
ip addr add 198.18.0.1/24 dev br0`)
	sh(t, tb.Sink, `ip addr flush dev eth0
ip addr add 198.18.0.3/24 dev eth0
ip route add default via 198.18.0.1`)
	return tb
}

const ipBridge = `ip link add br0 type bridge
ip link set in0 master br0
ip link set out0 master br0`

// l2Delta sends n datagrams from gen to dst and returns in0's bridged count, its counts by
// reason, and how many datagrams reached the sink.
func l2Delta(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, dst string, n int) (uint64, map[string]uint64, int) {
	t.Helper()
	before, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	arrived := len(captureDstMACs(t, tb, n, func() { sendUDP(t, tb, dst, n) }))
	after, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	passed := map[string]uint64{}
	for r, c := range after.Passed {
		if d := c.Packets - before.Passed[r].Packets; d > 0 {
			passed[r] = d
		}
	}
	return after.Bridged.Packets - before.Bridged.Packets, passed, arrived
}

// waitBridged waits until datagrams from gen to the sink are switched by the fast path, and
// checks that they arrive.
func waitBridged(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp) {
	t.Helper()
	eventually(t, 5*time.Second, "bridged by the fast path", func() error {
		b, passed, arrived := l2Delta(t, tb, l, sinkL2, 10)
		if b < 10 || arrived != 10 {
			return fmt.Errorf("bridged %d, arrived %d of 10; to Linux %v", b, arrived, passed)
		}
		return nil
	})
}

// waitL2Passed waits until datagrams from gen to the sink go to Linux for reason; want is how
// many of n must arrive (Linux's verdict).
func waitL2Passed(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp, reason string, want int) {
	t.Helper()
	eventually(t, 5*time.Second, "to Linux ("+reason+")", func() error {
		b, passed, arrived := l2Delta(t, tb, l, sinkL2, 10)
		if b != 0 || passed[reason] == 0 || arrived != want {
			return fmt.Errorf("bridged %d, arrived %d (want %d); to Linux %v", b, arrived, want, passed)
		}
		return nil
	})
}

// sinkSpeaks makes the sink send a frame through the bridge, so Linux learns its MAC.
func sinkSpeaks(t *testing.T, tb *testbed.Testbed) {
	t.Helper()
	// A port just added may still be settling (carrier, ARP): a few tries.
	var out string
	var err error
	for range 5 {
		if out, err = tb.Sink.Run("ping", "-c", "1", "-W", "1", "198.18.0.2"); err == nil {
			return
		}
	}
	t.Fatalf("ping from the sink: %v\n%s", err, out)
}

func TestBridgeLearnFlushMove(t *testing.T) {
	requireTool(t, "brctl")
	tb := bridgeTestbed(t, testbed.Options{TxChecksumOff: true}, `brctl addbr br0
brctl addif br0 in0
brctl addif br0 out0`)
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "in0", "in0 runs the bridge module", func(it *status.Interface) bool {
		return it.Program != nil && it.Program.Modules[0] == "bridge" && it.Master == "br0"
	})
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	tcpEchoTo(t, tb, sinkL2, 200)

	// A flush: Linux forgets both hosts; gen's next frame is relearned by Linux, the sink's
	// address only when it speaks again. Meanwhile Linux floods (and the sink still gets them).
	// The sink may still speak on its own (the echo's last TCP segments, IPv6 neighbour
	// discovery) and be learned again at once: if the fast path still bridges to it after the
	// controller has had time to follow the flush, flush again (at most three times).
	var err error
	for try := 0; try < 3; try++ {
		sh(t, tb.DUT, "ip link set br0 type bridge fdb_flush")
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			b, passed, arrived := l2Delta(t, tb, l, sinkL2, 10)
			if b == 0 && passed["bridge_destination_unknown"] > 0 && arrived == 10 {
				err = nil
				break
			}
			err = fmt.Errorf("bridged %d, arrived %d (want 10); to Linux %v", b, arrived, passed)
			time.Sleep(10 * time.Millisecond)
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("to Linux (bridge_destination_unknown) after a flush: %v", err)
	}
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)

	// The sink moves to another port (new cable, same MAC): Linux learns it there when it
	// speaks; the fast path must follow, never keep sending to the old port.
	sinkMAC := tb.SinkMAC.String()
	sh(t, tb.DUT, "ip link add out1 type veth peer name eth1 netns "+tb.Sink.Name+`
ip link set out1 master br0
ip link set out1 up
ethtool -K out1 gro on`)
	sh(t, tb.Sink, `ip link set eth0 down
ip addr flush dev eth0
ip link set eth1 address `+sinkMAC+`
ip link set eth1 up
ethtool -K eth1 gro on tx off
ip addr add 198.18.0.3/24 dev eth1`)
	// (GRO after up: turned on while down, the kernel enables NAPI at up but does not set the
	// redirect-target XDP feature on the peer out1, so linuxfp would rightly not redirect there.)
	tb.SinkIfindex = linkIndex(t, tb.Sink, "eth1")
	sinkSpeaks(t, tb)
	eventually(t, 5*time.Second, "bridged to the sink's new port", func() error {
		out, err := tb.DUT.Run("bridge", "fdb", "show", "br", "br0")
		if err != nil || !strings.Contains(out, sinkMAC+" dev out1") {
			return fmt.Errorf("fdb: %s %v", out, err)
		}
		b, passed, arrived := l2Delta(t, tb, l, sinkL2, 10)
		if b < 10 || arrived != 10 {
			it, _ := l.Interface("out1")
			return fmt.Errorf("bridged %d, arrived %d; to Linux %v; out1 %+v", b, arrived, passed, it)
		}
		return nil
	})
}

func TestBridgeSTPState(t *testing.T) {
	tb := bridgeTestbed(t, testbed.Options{}, ipBridge)
	l := startLinuxfp(t, tb)
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	// The sink's port stops forwarding: Linux drops what would go there; so must we.
	// (Blocking would not stick: without STP the kernel makes a blocking port forward again.)
	sh(t, tb.DUT, "bridge link set dev out0 state 1") // listening
	waitL2Passed(t, tb, l, "bridge_egress", 0)
	sh(t, tb.DUT, "bridge link set dev out0 state 3")
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	// gen's own port stops forwarding.
	sh(t, tb.DUT, "bridge link set dev in0 state 2") // learning
	waitL2Passed(t, tb, l, "bridge_port_state", 0)
	sh(t, tb.DUT, "bridge link set dev in0 state 3")
	waitBridged(t, tb, l)
	// Options the fast path does not model: Linux's.
	// (vlan_filtering is not built into this kernel; the graph's unit tests cover it.)
	sh(t, tb.DUT, "ip link set br0 promisc on")
	waitL2Passed(t, tb, l, "bridge_config", 10)
	sh(t, tb.DUT, "ip link set br0 promisc off")
	waitBridged(t, tb, l)
}

// br_netfilter: with bridge-nf-call-iptables=1 (the default), iptables FORWARD rules see bridged
// IPv4. A DROP rule must drop bridged frames, so they must go to Linux.
// br_netfilter: with bridge-nf-call-iptables=1 the iptables rules see bridged IP with the
// bridge as input and output device; the filter module decides them in the fast path, a rule it
// cannot evaluate hands the frames it could see to Linux, and nat chains make conntrack decide
// new connections. Bridge-family nftables rules keep every frame with Linux.
func TestBridgeNetfilter(t *testing.T) {
	requireTool(t, "iptables")
	tb := bridgeTestbed(t, testbed.Options{}, ipBridge)
	l := startLinuxfp(t, tb)
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	sh(t, tb.DUT, "iptables -A FORWARD -i br0 -o br0 -d "+sinkL2+" -j DROP")
	waitL2Dropped(t, tb, l)
	sh(t, tb.DUT, "sysctl -qw net.bridge.bridge-nf-call-iptables=0")
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l) // the rule no longer sees bridged frames
	sh(t, tb.DUT, "sysctl -qw net.bridge.bridge-nf-call-iptables=1")
	waitL2Dropped(t, tb, l)
	sh(t, tb.DUT, "iptables -D FORWARD -i br0 -o br0 -d "+sinkL2+" -j DROP")
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	// A rule on the bridge port (physdev) is not modelled: the frames it could see are Linux's.
	sh(t, tb.DUT, "iptables -A FORWARD -m physdev --physdev-in in0 -d "+sinkL2+" -j DROP")
	waitL2Passed(t, tb, l, "filter", 0)
	sh(t, tb.DUT, "iptables -F FORWARD")
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	// nat chains: netfilter tracks bridged connections too; a new one is Linux's to decide, the
	// rest of its (one-way, unreplied) datagrams are the fast path's.
	sh(t, tb.DUT, "iptables -t nat -A POSTROUTING -o lfpnone -j MASQUERADE")
	eventually(t, 5*time.Second, "a new flow's first datagram to Linux", func() error {
		b, passed, arrived := l2Delta(t, tb, l, sinkL2, 10)
		if b != 9 || passed["ct_new"] != 1 || arrived != 10 {
			return fmt.Errorf("bridged %d, arrived %d; to Linux %v; want 9 bridged after one ct_new", b, arrived, passed)
		}
		return nil
	})
	sh(t, tb.DUT, "nft delete table ip nat")
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	// A bridge-family nftables rule sees every bridged frame.
	requireTool(t, "nft")
	sh(t, tb.DUT, `nft add table bridge lfp
nft add chain bridge lfp fw { type filter hook forward priority 0 ; }
nft add rule bridge lfp fw ip daddr `+sinkL2+` drop`)
	waitL2Passed(t, tb, l, "bridge_config", 0)
	sh(t, tb.DUT, "nft delete table bridge lfp")
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
}

// waitL2Dropped waits until datagrams from gen to the sink are dropped by the fast path's filter.
func waitL2Dropped(t *testing.T, tb *testbed.Testbed, l *testbed.Linuxfp) {
	t.Helper()
	eventually(t, 5*time.Second, "dropped by the fast path", func() error {
		before, _ := l.Interface("in0")
		b, passed, arrived := l2Delta(t, tb, l, sinkL2, 10)
		after, _ := l.Interface("in0")
		if dropped := after.Dropped.Packets - before.Dropped.Packets; b != 0 || arrived != 0 || dropped < 10 {
			return fmt.Errorf("bridged %d, dropped %d, arrived %d; to Linux %v", b, dropped, arrived, passed)
		}
		return nil
	})
}

func TestBridgePortRemovalAndDeletion(t *testing.T) {
	tb := bridgeTestbed(t, testbed.Options{}, ipBridge)
	l := startLinuxfp(t, tb)
	sinkSpeaks(t, tb)
	waitBridged(t, tb, l)
	sh(t, tb.DUT, "ip link set out0 nomaster")
	waitStatus(t, l, "out0", "out0 no longer a port", func(it *status.Interface) bool {
		return it.Master == "" && (it.Program == nil || !strings.Contains(strings.Join(it.Program.Modules, ","), "bridge"))
	})
	// Linux flushed the sink's entry with the port; nothing reaches it now.
	waitL2Passed(t, tb, l, "bridge_destination_unknown", 0)
	sh(t, tb.DUT, "ip link del br0")
	waitStatus(t, l, "in0", "in0 no longer a port", func(it *status.Interface) bool {
		return it.Master == "" && (it.Program == nil || !strings.Contains(strings.Join(it.Program.Modules, ","), "bridge"))
	})
	st, err := l.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.FDBEntries != 0 {
		t.Fatalf("%d FDB entries still mirrored after the bridge was deleted", st.FDBEntries)
	}
}

// Frames to the bridge's MAC are routed as if received by br0 (bridge -> router), and routed
// packets leaving through br0 go to the port its FDB names (router -> bridge).
func TestBridgeRouterComposition(t *testing.T) {
	tb := newTestbed(t, testbed.Options{})
	sh(t, tb.DUT, `ip addr flush dev in0
ip link add br0 type bridge
ip link set in0 master br0
ip link set br0 up
ip addr add 198.18.0.1/24 dev br0
ip -6 addr add 2001:2::1/64 dev br0 nodad`)
	l := startLinuxfp(t, tb)
	waitStatus(t, l, "in0", "in0 runs bridge>router", func(it *status.Interface) bool {
		return it.Program != nil && strings.Join(it.Program.Modules, ">") == "bridge>router"
	})
	// gen -> br0 MAC -> routed out of out0.
	eventually(t, 5*time.Second, "bridge -> router", func() error {
		before, _ := l.Interface("in0")
		arrived := len(captureDstMACs(t, tb, 10, func() { sendUDP(t, tb, "198.19.3.1", 10) }))
		after, _ := l.Interface("in0")
		if f := after.Forwarded.Packets - before.Forwarded.Packets; f < 10 || arrived != 10 {
			return fmt.Errorf("routed %d, arrived %d; to Linux %v", f, arrived, after.Passed)
		}
		return nil
	})
	tcpEcho(t, tb, 100)
	// sink -> routed to br0 -> FDB -> in0: counted on out0.
	eventually(t, 5*time.Second, "router -> bridge", func() error {
		before, _ := l.Interface("out0")
		if err := tb.Sink.Do(func() error { return sendUDPFrom("198.18.0.2", 10) }); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
		after, _ := l.Interface("out0")
		if f := after.Forwarded.Packets - before.Forwarded.Packets; f < 10 {
			return fmt.Errorf("routed %d; to Linux %v", f, after.Passed)
		}
		return nil
	})
}

// Linux ages out an FDB entry ageing_time after the last frame it saw from that address. The
// fast path keeps a talking host's entry alive by refreshing it; Linux alone would too.
func TestBridgeAgeingRefresh(t *testing.T) {
	tb := bridgeTestbed(t, testbed.Options{}, ipBridge+"\nip link set br0 type bridge ageing_time 1000")
	// Only fast-pathed frames from gen may reach the bridge: the sink's address is static (it
	// never needs to speak), and neither host ever ARPs for the other.
	sh(t, tb.DUT, "bridge fdb replace "+tb.SinkMAC.String()+" dev out0 master static")
	// Nor does IPv6 (router and neighbour solicitations, MLD reports) speak for them.
	sh(t, tb.Gen, "ip neigh replace "+sinkL2+" lladdr "+tb.SinkMAC.String()+" dev eth0 nud permanent\nsysctl -qw net.ipv6.conf.all.disable_ipv6=1")
	sh(t, tb.Sink, "ip neigh replace 198.18.0.2 lladdr "+tb.GenMAC.String()+" dev eth0 nud permanent\nsysctl -qw net.ipv6.conf.all.disable_ipv6=1")
	l := startLinuxfp(t, tb)
	sendUDP(t, tb, sinkL2, 1) // Linux learns gen's address from this one
	waitBridged(t, tb, l)
	genMAC := tb.GenMAC.String()
	deadline := time.Now().Add(13 * time.Second)
	for time.Now().Before(deadline) {
		b, passed, _ := l2Delta(t, tb, l, sinkL2, 20)
		if b == 0 {
			t.Fatalf("not fast-pathed any more: %v", passed)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Still there, and refreshed within the last few seconds (Linux's "updated", in seconds).
	out, err := tb.DUT.Run("bridge", "-s", "-j", "fdb", "show", "br", "br0")
	if err != nil {
		t.Fatal(err)
	}
	var fdb []struct {
		MAC     string `json:"mac"`
		Ifname  string `json:"ifname"`
		Updated int    `json:"updated"`
	}
	if err := json.Unmarshal([]byte(out), &fdb); err != nil {
		t.Fatalf("bridge -j fdb: %v\n%s", err, out)
	}
	found := false
	for _, e := range fdb {
		if e.MAC == genMAC && e.Ifname == "in0" {
			found = true
			if e.Updated > 3 {
				t.Fatalf("gen's entry last updated %d s ago although gen kept sending through the fast path", e.Updated)
			}
		}
	}
	if !found {
		t.Fatalf("gen's FDB entry aged out although gen kept sending (through the fast path): %s", out)
	}
	if c := readCounters(t, l, "in0"); c.passed["bridge_refresh"] == 0 {
		t.Fatalf("no frame handed to Linux for its refresh: %v", c.passed)
	}
}
