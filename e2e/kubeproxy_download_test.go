package e2e

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// A long download through a ClusterIP on a dual-stack node (testbed.NewServices), in kube-proxy's
// iptables and nftables modes, over IPv4 and IPv6, from the client outside the cluster (routed:
// XDP at in0, tc at the backend pod's veth) and from a pod (the node's bridge carries the DNAT'd
// packets, translated by br_netfilter's hooks: tc at both pods' veths), with the client's sending
// side left open or shut after its request (half-closed: the entry is in CLOSE_WAIT for the
// transfer). Every byte arrives unaltered, the bytes sent after the connection was marked
// liberal are fast-pathed, and so are at least 99% of the bytes linuxfp's programs saw of the
// connection where it enters the node both ways (handshake and close included). A small first part goes before the connection is marked liberal (its packets
// are Linux's until then), so the share measures the fast path's behaviour, not how fast the
// controller marks.
func TestKubeProxyLongDownload(t *testing.T) {
	for _, mode := range []testbed.ProxyMode{testbed.ProxyIPTables, testbed.ProxyNFTables} {
		t.Run(string(mode), func(t *testing.T) {
			requireTool(t, map[testbed.ProxyMode]string{testbed.ProxyIPTables: "ip6tables-restore", testbed.ProxyNFTables: "nft"}[mode])
			kubeLongDownload(t, mode)
		})
	}
}

func kubeLongDownload(t *testing.T, mode testbed.ProxyMode) {
	const (
		port        = 8080      // the backend's
		first       = 256 << 10 // before the connection is marked liberal
		second      = 128 << 20
		minSharePct = 99
		tcpEstab    = 3
		tcpCloseW   = 5
	)
	s := newServices(t, nsPrefix+"-dl", testbed.ServicesOptions{Pods: 3, ProxyMode: mode, IPv6: true})
	backend, client := s.Pods[0], s.Pods[1]
	families := []struct {
		name              string
		svc, backend      netip.Addr
		clusterCIDR, svcs netip.Prefix
	}{
		{"ipv4", testbed.ServiceIP(0), backend.IP, testbed.PodsClusterCIDR, testbed.ServicesCIDR},
		{"ipv6", testbed.ServiceIP6(0), testbed.PodIP6(backend.IP), testbed.ServicesPodCIDR6, testbed.ServicesCIDR6},
	}
	// Both proxiers' rules, as kube-proxy keeps them on a dual-stack node; its CLOSE_WAIT timeout.
	for _, f := range families {
		k := testbed.KubeProxy{ClusterCIDR: f.clusterCIDR, ServiceCIDR: f.svcs,
			Services: []testbed.KubeService{kubeSvc("download", "tcp", f.svc, 80, 0, netip.AddrPortFrom(f.backend, port))}}
		apply := k.Apply
		if mode == testbed.ProxyNFTables {
			apply = k.ApplyNFT
		}
		if err := apply(s.Node); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, s.Node, "sysctl -qw net.netfilter.nf_conntrack_tcp_timeout_close_wait=3600")
	if err := s.ResolveNeighbours(); err != nil {
		t.Fatal(err)
	}
	ifaces := []string{"in0", backend.HostVeth, client.HostVeth}
	l, err := testbed.StartLinuxfpIn(s.Node, linuxfpBin, func(st *status.Status) bool {
		got := 0
		for _, it := range st.Interfaces {
			if contains(ifaces, it.Name) && it.Program != nil && contains(it.Program.Families, "ipv4") && contains(it.Program.Families, "ipv6") {
				got++
			}
		}
		return got == len(ifaces) && contains(st.Conntrack, "ipv4") && contains(st.Conntrack, "ipv6")
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, l)

	for _, f := range families {
		for _, from := range []struct {
			name string
			ns   *nsutil.NS
			in   string // where the client's packets enter the node
		}{{"client", s.Client, "in0"}, {"pod", client.NS, client.HostVeth}} {
			for _, half := range []bool{false, true} {
				name := f.name + ", from the " + from.name
				wantState := uint8(tcpEstab)
				if half {
					name += ", half-closed"
					wantState = tcpCloseW
				}
				st0, err := l.Client.Status()
				if err != nil {
					t.Fatal(err)
				}
				fwd0, passed0 := byteCounts(t, l, from.in, backend.HostVeth)
				hc := startHalfClosed(t, backend.NS, from.ns, netip.AddrPortFrom(f.backend, port).String(),
					netip.AddrPortFrom(f.svc, 80).String(), half)
				hc.transfer(t, first)
				waitLiberalMarks(t, l, name+": connection marked liberal", st0.CTLiberal+1)
				hc.transfer(t, second)
				e, err := ctEntry(s.Node, unix.IPPROTO_TCP, f.svc.String(), 80)
				if err != nil {
					t.Fatal(err)
				}
				if e.ProtoInfo.TCP == nil || e.ProtoInfo.TCP.State != wantState {
					t.Errorf("%s: entry mid-transfer %+v, want TCP state %d", name, e.ProtoInfo.TCP, wantState)
				}
				hc.finish(t)
				fwd1, passed1 := byteCounts(t, l, from.in, backend.HostVeth)
				fwd, passed := fwd1-fwd0, passed1-passed0
				// The share is of what the programs saw: the data direction must have been among it.
				if fwd < second {
					t.Errorf("%s: download of %d bytes: %d bytes fast-pathed at %s and %s, want at least the %d sent after the connection was marked liberal",
						name, first+second, fwd, from.in, backend.HostVeth, second)
				}
				if fwd*100 < (fwd+passed)*minSharePct {
					t.Errorf("%s: download of %d bytes: %d bytes fast-pathed, %d to Linux at %s and %s (%.2f%%); want at least %d%%",
						name, first+second, fwd, passed, from.in, backend.HostVeth, 100*float64(fwd)/float64(fwd+passed), minSharePct)
				}
				t.Logf("%s: %d bytes fast-pathed, %d to Linux (%.3f%%)", name, fwd, passed, 100*float64(fwd)/float64(fwd+passed))
				// The next download's entry is the only one to the cluster IP.
				flushConntrack(t, s.Node)
			}
		}
	}
}
