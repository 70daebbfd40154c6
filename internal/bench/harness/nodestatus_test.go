package harness

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// statusJSON is `linuxfp status -j` trimmed to what the benchmark reads, with a counter this
// version of the benchmark does not know ("encapsulated").
func statusJSON(bridged, encap, fib uint64) string {
	n := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return `{"pid": 1, "ct_liberal": 3, "interfaces": [
 {"ifindex": 1, "name": "lo", "notes": ["loopback: not accelerated"], "forwarded": {"packets": 0, "bytes": 0}},
 {"ifindex": 2, "name": "eth0", "kind": "veth", "program": {"id": 7, "hook": "tc"},
  "forwarded": {"packets": 0, "bytes": 0}, "passed": {"fib_not_forwarded": {"packets": ` + n(fib) + `, "bytes": 1}}},
 {"ifindex": 3, "name": "flannel.1", "kind": "vxlan", "program": null, "notes": ["vxlan: not yet"],
  "forwarded": {"packets": 0, "bytes": 0}},
 {"ifindex": 4, "name": "cni0", "kind": "bridge", "forwarded": {"packets": 0, "bytes": 0}},
 {"ifindex": 5, "name": "veth0a0b0c0d", "kind": "veth", "master": "cni0", "program": {"id": 8, "hook": "tc"},
  "forwarded": {"packets": 2, "bytes": 0}, "bridged": {"packets": ` + n(bridged) + `, "bytes": 0},
  "encapsulated": {"packets": ` + n(encap) + `, "bytes": 0}, "filter_dropped": {"packets": 1, "bytes": 0},
  "passed": {"ct_state": {"packets": 4, "bytes": 0}, "ct_new": {"packets": 1, "bytes": 0}}}
]}`
}

func TestParseNodeStatus(t *testing.T) {
	a, err := parseNodeStatus([]byte(statusJSON(100, 50, 30)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseNodeStatus([]byte(statusJSON(1100, 20, 90)))
	if err != nil {
		t.Fatal(err)
	}
	b.Node = "node1"
	veth := b.ifaces["veth0a0b0c0d"]
	if veth.role != "pod veths" || !veth.program || veth.counts.Fast() != 1100+20+2 || veth.counts.Dropped != 1 || veth.counts.PassedTotal() != 5 {
		t.Errorf("pod veth: %+v", veth)
	}
	if it := b.ifaces["flannel.1"]; it.role != "flannel.1" || it.program {
		t.Errorf("flannel.1: %+v", it)
	}
	if it := b.ifaces["eth0"]; it.role != "eth0" || !it.program || it.counts.Passed["fib_not_forwarded"] != 90 {
		t.Errorf("eth0: %+v", it)
	}

	d := a.Delta(b)
	// 1000 more bridged; "encapsulated" went from 50 to 20 (its program was replaced): 20 new.
	if d.Node != "node1" || d.FastPathed["bridged"] != 1000 || d.FastPathed["encapsulated"] != 20 || d.FastPathed["forwarded"] != 0 {
		t.Errorf("fast-pathed %v", d.FastPathed)
	}
	if d.Passed["fib_not_forwarded"] != 60 || len(d.Passed) != 1 || d.Dropped != 0 {
		t.Errorf("passed %v, dropped %d", d.Passed, d.Dropped)
	}
	if d.Runs() != 1080 || d.Interfaces["eth0"].PassedTotal() != 60 || d.Interfaces["pod veths"].Fast() != 1020 {
		t.Errorf("runs %d, by interface %+v", d.Runs(), d.Interfaces)
	}
	if _, ok := d.Interfaces["flannel.1"]; ok {
		t.Errorf("flannel.1 saw no packet but is listed: %+v", d.Interfaces)
	}
	// flannel.1 has no program (its notes say why); cni0 never has one, its ports do.
	if len(d.NoProgram) != 1 || d.NoProgram["flannel.1"] != "vxlan: not yet" {
		t.Errorf("no program: %v", d.NoProgram)
	}
	if !slices.Equal(d.VXLANNotes, []string{"flannel.1: vxlan: not yet"}) {
		t.Errorf("vxlan notes %q", d.VXLANNotes)
	}
	if d.CTLiberal != 0 {
		t.Errorf("ct liberal %d, want 0 (3 before and after)", d.CTLiberal)
	}
	if _, err := parseNodeStatus([]byte("linuxfp is not running")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestRRStats(t *testing.T) {
	var v []time.Duration
	for i := 100; i >= 1; i-- {
		v = append(v, time.Duration(i)*time.Microsecond)
	}
	lr := RRStats(v, 2*time.Second)
	if lr.Transactions != 100 || lr.TPS != 50 || lr.AvgUs != 50.5 || lr.P99Us != 99 {
		t.Errorf("%+v", lr)
	}
	if lr.StddevUs < 28.8 || lr.StddevUs > 28.9 { // population stddev of 1..100
		t.Errorf("stddev %f", lr.StddevUs)
	}
}
