package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/status"
)

// The lines above the table say how the controller watches, whether the fence holds packets,
// and what an apply failure hands to Linux; each appears only when it has something to say.
func TestPrintStatusHeader(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name      string
		mutate    func(st *status.Status)
		want, not []string
	}{
		{name: "idle, no fence watcher", mutate: func(*status.Status) {},
			want: []string{"fence: off (changes are followed by notifications"},
			not:  []string{"APPLY FAILED", "to Linux until an apply succeeds", "changes seen as made", "bridge fdb", "conntrack:", "programs:"}},
		{name: "fence on, nothing waiting", mutate: func(st *status.Status) { st.FenceWatch = true },
			want: []string{"fence: on (a change's packets go to Linux from the moment"}},
		{name: "fence holding both families", mutate: func(st *status.Status) {
			st.FenceWatch, st.Fenced = true, []string{"ipv4", "ipv6"}
		}, want: []string{"fence: on; ipv4 and ipv6 packets go to Linux until a change just made is followed"}},
		{name: "fence holding changed devices", mutate: func(st *status.Status) {
			st.FenceWatch, st.Fenced = true, []string{"ipv6", "devices"}
		}, want: []string{"fence: on; ipv6 and the changed devices' packets go to Linux until a change just made is followed"}},
		{name: "apply failed", mutate: func(st *status.Status) {
			st.ApplyError, st.ApplyErrorSince, st.FamiliesToLinux = "update maps: no space", &since, []string{"ipv4"}
		}, want: []string{"APPLY FAILED 1m0s ago, retrying: update maps: no space", "to Linux until an apply succeeds: every ipv4 packet (apply_failed)"}},
		{name: "changes seen, in class order", mutate: func(st *status.Status) {
			st.NetlinkChanges = map[string]uint64{"route": 3, "address": 1, "ipset": 2}
		}, want: []string{"changes seen as made: address 1, ipset 2, route 3"}},
		{name: "modules' state", mutate: func(st *status.Status) {
			st.Conntrack, st.CTLiberal, st.CTLiberalFailed = []string{"ipv4"}, 7, 1
			st.FDBEntries = 4
			st.ProgramKinds, st.ProgramsVerified = 2, 3
			st.FilterRules = []status.FilterRule{{Family: "ipv4", Rule: "ip filter FORWARD rule 1", Counter: status.Counter{Packets: 5, Bytes: 300}}}
		}, want: []string{
			"conntrack: ipv4 connections tracked by netfilter: established ones fast-pathed (translated ones too, unless an interface's notes say why not); 7 TCP connections marked liberal (1 failed)",
			"bridge fdb: 4 entries mirrored (a learned address's frame per second goes to Linux, which keeps its entry fresh: bridge_refresh)",
			"programs: 2 held, one per kind of interface (shared by the interfaces of that kind); 3 verified since the start",
			"filter fast path: ipv4 ip filter FORWARD rule 1: 5 packets, 300 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := snap(1)
			tc.mutate(st)
			var b bytes.Buffer
			printStatus(&b, st, nil, false, 0)
			report := b.String()
			for _, w := range tc.want {
				if !strings.Contains("\n"+report, "\n"+w) {
					t.Errorf("no line starting %q in:\n%s", w, report)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(report, n) {
					t.Errorf("%q in:\n%s", n, report)
				}
			}
		})
	}
}

// The table's MASTER and EGRESS columns, and the notes under it: an interface's notes, why it is
// no XDP egress, what the VXLAN module did, and what went to Linux by reason, sorted.
func TestPrintStatusInterfaces(t *testing.T) {
	port := iface(3, "veth0", 7, 0, 5, 0, 0, map[string]uint64{"ttl": 2, "fib_no_neigh": 4})
	port.Master, port.TCEgress, port.TCPeer = "br0", true, true
	port.EgressNote = "veth peer has no XDP program and no GRO: a redirected frame would be dropped"
	port.Decapsulated = status.Counter{Packets: 6}
	port.Notes = []string{"hook tc: chosen by --hook"}
	nic := iface(2, "eth0", 8, 0, 0, 0, 0, nil)
	nic.Egress, nic.TCEgress = true, true
	quiet := iface(4, "dummy0", 0, 0, 0, 0, 0, nil)
	var b bytes.Buffer
	printStatus(&b, snap(1, nic, port, quiet), nil, false, 0)
	report := b.String()
	for name, want := range map[string][2]string{"eth0": {"-", "xdp,tc"}, "veth0": {"br0", "tc>peer"}, "dummy0": {"-", "no"}} {
		row := tableRow(t, report, name)
		if row[1] != want[0] || row[len(row)-1] != want[1] {
			t.Errorf("%s: master %s, egress %s; want %s, %s\n%s", name, row[1], row[len(row)-1], want[0], want[1], report)
		}
	}
	wantNotes := "\nveth0:\n" +
		"  hook tc: chosen by --hook\n" +
		"  xdp egress: veth peer has no XDP program and no GRO: a redirected frame would be dropped\n" +
		"  VXLAN decapsulated in the fast path: 6\n" +
		"  routed into vxlan and encapsulated in the fast path: 5\n" +
		"  to Linux by reason: fib_no_neigh 4, ttl 2\n"
	if !strings.HasSuffix(report, wantNotes) {
		t.Errorf("notes: want the report to end with\n%s\ngot\n%s", wantNotes, report)
	}
	if strings.Contains(report, "\neth0:\n") || strings.Contains(report, "\ndummy0:\n") {
		t.Errorf("notes for an interface with nothing to say:\n%s", report)
	}
}
