package e2e

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"

	"github.com/linuxfp/linuxfp/internal/packet"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// NAT rules on the DUT, tracked UDP flows through it: each flow's first datagram makes Linux
// create the conntrack entry (and the translation), the later ones the fast path forwards
// untranslated or translates as the entry says. The sink must receive the same bytes (IPv4 ID
// included: forwarded packets keep theirs) as with Linux alone.
const diffNATSetup = `iptables -t nat -A POSTROUTING -o out0 -p udp --dport 5000:5999 -j MASQUERADE
iptables -t nat -A POSTROUTING -o out0 -p udp --dport 6000:6999 -j SNAT --to-source 198.18.1.1
iptables -t nat -A PREROUTING -d 198.19.40.0/24 -p udp -j DNAT --to-destination 198.19.41.7
iptables -A FORWARD -p udp --dport 7777 -j DROP
ip route add unreachable 198.19.201.0/24`

func TestDifferentialNAT(t *testing.T) {
	for _, hook := range diffHooks[:2] {
		t.Run(hook.name, func(t *testing.T) {
			tb := newTestbed(t, hook.opts)
			d := newDiffEnv(t, tb, diffNATSetup)
			d.hook = hook.name
			// Masqueraded and SNAT'd datagrams carry the DUT's out0 address: forwarded all the
			// same, their IDs are compared (the ICMP errors the DUT sends gen come from in0's).
			d.originated = func(a netip.Addr) bool { return a == testbed.SinkAddr || a == testbed.InAddr }
			d.preRun = func(t *testing.T) {
				// Every run starts with no connection tracked.
				if err := tb.DUT.Do(func() error {
					c, err := conntrack.Dial(nil)
					if err != nil {
						return err
					}
					defer c.Close()
					return c.Flush()
				}); err != nil {
					t.Fatal(err)
				}
			}
			d.differential(t, d.natCorpus(), time.Second, true)
		})
	}
}

func (d *diffEnv) natCorpus() *diffCorpus {
	b := d.newBuilder(11)
	const per = 3 // datagrams per flow
	flow := func(name string, fast bool, spec packet.Spec, post ...func([]byte) []byte) {
		// The first datagram of a flow (whichever comes first after the shuffle) is Linux's;
		// the builder counts every one as fast, the harness wants 90% of what it counts.
		b.add(name, per, fast, func(i int) packet.Spec { return spec }, post...)
	}
	zeroUDPCsum := func(f []byte) []byte { f[14+20+6], f[14+20+7] = 0, 0; return f }
	for i := 0; i < 25; i++ {
		s := b.v4(b.route4())
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		flow("masquerade", true, s)
		s = b.v4(b.route4())
		s.DstPort = uint16(6000 + b.r.Intn(1000))
		flow("snat", true, s)
		s = b.v4(testbed.Prefix4(40, 1+b.r.Intn(254)))
		flow("dnat", true, s)
		s = b.v4(testbed.Prefix4(40, 1+b.r.Intn(254)))
		flow("dnat, no udp checksum", true, s, zeroUDPCsum)
		s = b.v4(b.route4())
		s.DstPort = uint16(8000 + b.r.Intn(1000))
		flow("tracked, untranslated", true, s)
		s = b.v4(b.route4())
		s.DstPort = 7777
		flow("dropped by a rule", false, s)
	}
	for i := 0; i < 5; i++ {
		// ICMP errors back to gen: Linux's answers, quoting the datagram (masqueraded or not).
		s := b.v4(testbed.Prefix4(201, 1+b.r.Intn(254)))
		s.Src = b.ownSource()
		s.DstPort = uint16(5000 + b.r.Intn(1000))
		b.add("unreachable", 1, false, func(int) packet.Spec { return s })
	}
	c := b.done()
	// A flow's first datagram goes to Linux (ct_new).
	c.fast = c.fast * (per - 1) / per
	return c
}
