// Package bridge is the bridge benchmark (the paper's bridge experiment): the DUT switches gen's
// frames to the sink through a Linux bridge, with the throughput, latency and CPU tests of the
// harness's pipeline.
package bridge

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Run runs the bridge benchmark: br0 with in0 and out0 as ports, all hosts in one subnet; Linux,
// linuxfp and a hand-written ceiling (redirect in0 -> out0, frames unmodified) switch
// alternately, round by round, with the same throughput, latency and CPU tests as the router
// benchmark. The bridge learns where gen and the sink are before every measurement
// (bridgeLearn). It returns what it measured even when ctx is cancelled half-way (with ctx's
// error); every namespace it created is gone when it returns.
func Run(ctx context.Context, cfg harness.PipelineConfig) (*harness.PipelineResult, error) {
	return harness.RunPipeline(ctx, cfg, topology)
}

var topology = &harness.Topology{
	Name:   "bridge",
	Module: "bridge",
	Describe: func(w io.Writer, s *harness.PipelineSettings) {
		fmt.Fprintln(w, "Bridge: gen -> DUT (br0, in0 -> out0) -> sink over veth, one IPv4 subnet, UDP to port 9")
		if br, ok := s.Bridge.(*Settings); ok {
			fmt.Fprintf(w, "br0: FDB learned (%s), ageing %s, bridge-nf-call-iptables=%d\n", br.Learning, br.Ageing, br.NFCallIptables)
		}
	},
	Build: func(o testbed.Options) (*testbed.Testbed, error) { return testbed.NewBridge("lfp-bridge", o) },
	// From gen to the sink's own MAC and address: the bridge finds out0 in its FDB.
	Flow: func(tb *testbed.Testbed) harness.Flow {
		return harness.Flow{Src: tb.GenMAC, Dst: tb.SinkMAC, SrcIP: tb.GenIP, DstIP: tb.SinkIP, Ifindex: tb.GenIfindex}
	},
	L2: true,
	// No pings: the generator addresses its frames itself, the bridge learns from bridgeLearn's
	// frames, and the latency test's TCP resolves (and confirms) the neighbours as it connects.
	// A ping would leave neighbour probes for seconds afterwards (the answering host's entry
	// goes STALE -> DELAY -> PROBE), answered by gen's stack in the middle of measurements.
	Resolve:      false,
	StartLinuxfp: startLinuxfp,
	Setup:        bridgeSetup,
	Prepare:      bridgeLearn,
}

// Settings is the DUT's bridge as the benchmark found it (iproute2's defaults).
type Settings struct {
	Ageing string `json:"ageing_time"`
	// br_netfilter is built into this kernel: with bridge-nf-call-iptables=1 (its default)
	// Linux passes bridged IPv4 frames through the iptables hooks (empty in the DUT), which is
	// part of what Linux's bridging costs here.
	NFCallIptables  int    `json:"bridge_nf_call_iptables"`
	NFCallIp6tables int    `json:"bridge_nf_call_ip6tables"`
	Learning        string `json:"learning"`
}

const learningNote = "gen and sink send one frame each before every measurement"

// bridgeSetup records how the DUT's bridge is configured, and checks that its FDB entries cannot
// age out during one measurement (they are learned again before the next).
func bridgeSetup(b *harness.Pipeline) error {
	var ageing time.Duration
	err := b.TB.DUT.Do(func() error {
		lk, err := netlink.LinkByName(b.TB.Bridge)
		if err != nil {
			return err
		}
		br, ok := lk.(*netlink.Bridge)
		if !ok || br.AgeingTime == nil {
			return fmt.Errorf("%s: no bridge ageing time in its attributes", b.TB.Bridge)
		}
		ageing = time.Duration(*br.AgeingTime) * time.Second / 100 // centiseconds
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the DUT's bridge: %w", err)
	}
	longest := b.Cfg.Warmup + max(b.Cfg.Duration, b.Cfg.CPUDuration)
	if ageing > 0 && longest >= ageing {
		return fmt.Errorf("a measurement (warm-up + duration: %s) would outlast %s's FDB ageing time (%s): learned entries could expire during it",
			longest, b.TB.Bridge, ageing)
	}
	s := &Settings{Ageing: ageing.String(), Learning: learningNote}
	for name, v := range map[string]*int{
		"net.bridge.bridge-nf-call-iptables":  &s.NFCallIptables,
		"net.bridge.bridge-nf-call-ip6tables": &s.NFCallIp6tables,
	} {
		out, err := b.TB.DUT.Run("sysctl", "-n", name)
		if err != nil {
			return err
		}
		if *v, err = strconv.Atoi(strings.TrimSpace(out)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	b.Res.Config.Bridge = s
	b.Log.Info("DUT bridge", "bridge", b.TB.Bridge, "ageing", s.Ageing,
		"bridge_nf_call_iptables", s.NFCallIptables, "bridge_nf_call_ip6tables", s.NFCallIp6tables)
	return nil
}

// learnEthertype is the IEEE 802 local experimental ethertype 1: no stack handles it.
const learnEthertype = 0x88b5

// bridgeLearn makes the bridge learn again where gen and the sink are, right before a
// measurement: each sends one frame through it, and the FDB must then hold gen's MAC on in0 and
// the sink's on out0, learned (not static) and updated since. Learning before every measurement
// keeps the entries from ageing out however long the benchmark runs, in the XDP modes too, where
// the generator's frames never reach the bridge, and nothing ages out mid-run.
//
// The frames are not IP (learnEthertype, unicast to the other host): the ceiling passes them to
// the bridge (it redirects all IPv4); they create no neighbour state on the hosts (a ping would,
// and the ARP probe that follows a few seconds later would leave gen's stack in the middle of a
// measurement, see measureFull); and the receiving stack drops them.
//
// A bridge that has not learned both after a second is reported as the round's problem.
func bridgeLearn(b *harness.Pipeline) (problem string, err error) {
	tb := b.TB
	t0 := time.Now()
	if err := sendFrame(tb.Gen, tb.GenIfindex, learnFrame(tb.GenMAC, tb.SinkMAC)); err != nil {
		return "", err
	}
	if err := sendFrame(tb.Sink, tb.SinkIfindex, learnFrame(tb.SinkMAC, tb.GenMAC)); err != nil {
		return "", err
	}
	want := []fdbWant{
		{host: "gen", mac: tb.GenMAC, port: "in0", ifindex: tb.InIfindex},
		{host: "sink", mac: tb.SinkMAC, port: "out0", ifindex: tb.OutIfindex},
	}
	for {
		problem, err := fdbProblem(tb, want, time.Since(t0))
		if err != nil || problem == "" || time.Since(t0) > time.Second {
			return problem, err
		}
		time.Sleep(time.Millisecond)
	}
}

func learnFrame(src, dst net.HardwareAddr) []byte {
	f := make([]byte, 60) // the Ethernet minimum without FCS
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], learnEthertype)
	copy(f[14:], "linuxfp bench: bridge learning")
	return f
}

// sendFrame sends frame as it is out of ifindex in ns.
func sendFrame(ns *nsutil.NS, ifindex int, frame []byte) error {
	return ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket in %s: %w", ns.Name, err)
		}
		defer unix.Close(fd)
		var proto [2]byte
		binary.BigEndian.PutUint16(proto[:], learnEthertype)
		sa := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: binary.NativeEndian.Uint16(proto[:])}
		if err := unix.Sendto(fd, frame, 0, sa); err != nil {
			return fmt.Errorf("send a frame in %s: %w", ns.Name, err)
		}
		return nil
	})
}

// fdbWant is a host's MAC and the bridge port the FDB should hold it on.
type fdbWant struct {
	host, port string
	mac        net.HardwareAddr
	ifindex    int
}

// fdbProblem says what the DUT's FDB lacks of want ("" if nothing), for entries that should
// have been updated within the last since.
func fdbProblem(tb *testbed.Testbed, want []fdbWant, since time.Duration) (string, error) {
	var fdb []netlink.Neigh
	err := tb.DUT.Do(func() error {
		var err error
		fdb, err = netlink.NeighList(0, unix.AF_BRIDGE)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("dump the DUT's FDB: %w", err)
	}
	var problems []string
	for _, w := range want {
		var e *netlink.Neigh
		for i := range fdb {
			if fdb[i].HardwareAddr.String() == w.mac.String() && fdb[i].LinkIndex == w.ifindex {
				e = &fdb[i]
			}
		}
		switch {
		case e == nil:
			problems = append(problems, fmt.Sprintf("%s's MAC %s is not on %s", w.host, w.mac, w.port))
		case e.State != unix.NUD_REACHABLE: // static: NUD_NOARP, local: NUD_PERMANENT, expired: NUD_STALE
			problems = append(problems, fmt.Sprintf("%s's MAC %s on %s is not a live learned entry (state %#x)", w.host, w.mac, w.port, e.State))
		case fdbAge(e) > since+fdbTick: // a tick more for rounding
			problems = append(problems, fmt.Sprintf("%s's MAC %s on %s was last learned %s ago, before its frame", w.host, w.mac, w.port, fdbAge(e)))
		}
	}
	return strings.Join(problems, "; "), nil
}

// fdbTick is the unit of an FDB entry's times: USER_HZ ticks.
const fdbTick = time.Second / harness.UserHZ

// fdbAge is how long ago the bridge last saw a frame from e's MAC on e's port.
func fdbAge(e *netlink.Neigh) time.Duration { return time.Duration(e.Updated) * fdbTick }

// startLinuxfp starts linuxfp in the DUT and waits until it has decided about both bridge
// ports and settled.
func startLinuxfp(tb *testbed.Testbed, bin string, args ...string) (*testbed.Linuxfp, error) {
	return harness.StartLinuxfp(tb.DUT, bin, []string{"in0", "out0"}, 5*time.Second, args...)
}
