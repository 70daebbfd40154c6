package harness

import (
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
)

// ReadNodeStatus runs `linuxfp status -j` in ns, as a person would, and reads its counters.
func ReadNodeStatus(ns *nsutil.NS, bin string) (*NodeSnapshot, error) {
	cmd := exec.Command("ip", "netns", "exec", ns.Name, bin, "status", "-j")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("linuxfp status -j: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseNodeStatus(out)
}

// NodeSnapshot is one node's linuxfp counters at one moment.
type NodeSnapshot struct {
	Node      string
	ctLiberal uint64
	ifaces    map[string]ifaceSnapshot
}

type ifaceSnapshot struct {
	role      string
	program   bool
	notes     []string
	counts    FastPathCounts
	hasCounts bool
}

// parseNodeStatus reads `linuxfp status -j`'s output. Every per-interface object of the form
// {"packets": N, ...} counts: "passed" holds the packets handed to Linux by reason,
// "filter_dropped" those the fast path dropped, and every other one (forwarded, bridged, and
// whatever later versions add) packets the fast path sent on itself. Reading them by shape
// rather than by name keeps the benchmark honest about a linuxfp newer than itself.
func parseNodeStatus(b []byte) (*NodeSnapshot, error) {
	var raw struct {
		CTLiberal  uint64                       `json:"ct_liberal"`
		Interfaces []map[string]json.RawMessage `json:"interfaces"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("read linuxfp status -j: %w", err)
	}
	s := &NodeSnapshot{ctLiberal: raw.CTLiberal, ifaces: map[string]ifaceSnapshot{}}
	for _, it := range raw.Interfaces {
		var name, kind, master string
		var notes []string
		for k, v := range map[string]any{"name": &name, "kind": &kind, "master": &master, "notes": &notes} {
			if m, ok := it[k]; ok {
				if err := json.Unmarshal(m, v); err != nil {
					return nil, fmt.Errorf("read linuxfp status -j: interface %s: %s: %w", name, k, err)
				}
			}
		}
		is := ifaceSnapshot{role: podsRole(name, kind, master), notes: notes, counts: FastPathCounts{}}
		_, is.program = it["program"]
		if string(it["program"]) == "null" {
			is.program = false
		}
		for k, v := range it {
			switch k {
			case "passed":
				var passed map[string]status.Counter
				if err := json.Unmarshal(v, &passed); err != nil {
					return nil, fmt.Errorf("read linuxfp status -j: interface %s: passed: %w", name, err)
				}
				for reason, c := range passed {
					is.counts.addPassed(reason, c.Packets)
				}
				is.hasCounts = true
			default:
				var c struct {
					Packets *uint64 `json:"packets"`
				}
				if json.Unmarshal(v, &c) != nil || c.Packets == nil {
					continue
				}
				is.hasCounts = true
				if k == "filter_dropped" {
					is.counts.Dropped += *c.Packets
				} else {
					is.counts.addFast(k, *c.Packets)
				}
			}
		}
		s.ifaces[name] = is
	}
	return s, nil
}

// podsRole groups a node's interfaces for the report: its underlay, Flannel's VXLAN device, the
// CNI bridge, and the pods' host veths (its ports).
func podsRole(name, kind, master string) string {
	switch {
	case name == "eth0":
		return "eth0"
	case kind == "vxlan" || name == "flannel.1":
		return "flannel.1"
	case name == "cni0":
		return "cni0"
	case master == "cni0":
		return "pod veths"
	}
	return name
}

// Delta is what the node's programs did between s and t (t later). A counter that went down
// (a program replaced, its counters restarted) counts from zero.
func (s *NodeSnapshot) Delta(t *NodeSnapshot) *NodeFastPath {
	fp := &NodeFastPath{Node: t.Node, Interfaces: map[string]*FastPathCounts{}, CTLiberal: CounterDelta(s.ctLiberal, t.ctLiberal)}
	for _, name := range slices.Sorted(maps.Keys(t.ifaces)) {
		b := t.ifaces[name]
		if !b.program && b.role != "cni0" && b.role != "lo" {
			if fp.NoProgram == nil {
				fp.NoProgram = map[string]string{}
			}
			fp.NoProgram[name] = strings.Join(b.notes, "; ")
		}
		if b.role == "flannel.1" {
			for _, n := range b.notes {
				if strings.HasPrefix(n, "vxlan") {
					fp.VXLANNotes = append(fp.VXLANNotes, name+": "+n)
				}
			}
		}
		if !b.hasCounts {
			continue
		}
		d := b.counts.since(s.ifaces[name].counts)
		if d.Runs() == 0 {
			continue
		}
		fp.Add(d)
		if fp.Interfaces[b.role] == nil {
			fp.Interfaces[b.role] = &FastPathCounts{}
		}
		fp.Interfaces[b.role].Add(d)
	}
	return fp
}

func CounterDelta(a, b uint64) uint64 {
	if b < a {
		return b
	}
	return b - a
}

// FastPathCounts is what fast-path programs did with the packets they saw.
type FastPathCounts struct {
	// FastPathed: packets the fast path sent on itself, by counter (forwarded, bridged ...).
	FastPathed map[string]uint64 `json:"fast_pathed,omitempty"`
	// Dropped: packets its filter module dropped (a netfilter rule would have).
	Dropped uint64 `json:"filter_dropped,omitempty"`
	// Passed: packets handed to Linux, by reason.
	Passed map[string]uint64 `json:"passed_to_linux,omitempty"`
}

func (c *FastPathCounts) addFast(kind string, n uint64) { addCount(&c.FastPathed, kind, n) }

func (c *FastPathCounts) addPassed(reason string, n uint64) { addCount(&c.Passed, reason, n) }

// addCount adds n to (*m)[k], making *m if it needs to (a zero count adds no key).
func addCount(m *map[string]uint64, k string, n uint64) {
	if n == 0 {
		return
	}
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[k] += n
}

func (c *FastPathCounts) Add(o FastPathCounts) {
	for k, v := range o.FastPathed {
		c.addFast(k, v)
	}
	for k, v := range o.Passed {
		c.addPassed(k, v)
	}
	c.Dropped += o.Dropped
}

// since is c minus an earlier a, counter by counter.
func (c FastPathCounts) since(a FastPathCounts) FastPathCounts {
	d := FastPathCounts{Dropped: CounterDelta(a.Dropped, c.Dropped)}
	for k, v := range c.FastPathed {
		d.addFast(k, CounterDelta(a.FastPathed[k], v))
	}
	for k, v := range c.Passed {
		d.addPassed(k, CounterDelta(a.Passed[k], v))
	}
	return d
}

func (c FastPathCounts) Fast() uint64 {
	var n uint64
	for _, v := range c.FastPathed {
		n += v
	}
	return n
}

func (c FastPathCounts) PassedTotal() uint64 {
	var n uint64
	for _, v := range c.Passed {
		n += v
	}
	return n
}

// Runs is how many packets the programs saw (each program run decides one packet).
func (c FastPathCounts) Runs() uint64 { return c.Fast() + c.Dropped + c.PassedTotal() }

// NodeFastPath is what linuxfp's programs in one node did during one measurement, summed over
// its interfaces (a packet crossing two programs counts twice), and by interface role.
type NodeFastPath struct {
	Node string `json:"node"`
	FastPathCounts
	Interfaces map[string]*FastPathCounts `json:"by_interface,omitempty"`
	// CTLiberal: TCP connections linuxfp marked liberal in conntrack meanwhile.
	CTLiberal uint64 `json:"ct_liberal,omitempty"`
	// NoProgram: interfaces without a linuxfp program, with linuxfp's notes saying why.
	NoProgram map[string]string `json:"no_program,omitempty"`
	// VXLANNotes: what linuxfp says about its VXLAN device (what it encapsulates and
	// decapsulates, and why not).
	VXLANNotes []string `json:"vxlan_notes,omitempty"`
}

// Summary is a one-line account for the log.
func (fp *NodeFastPath) Summary() string {
	if fp.Runs() == 0 {
		return "no packets"
	}
	return fmt.Sprintf("fast-pathed %d of %d (%.1f%%), to Linux %s", fp.Fast(), fp.Runs(),
		100*float64(fp.Fast())/float64(fp.Runs()), CountsString(fp.Passed))
}

// CountsString lists counts largest first: "ct_state 12, not_ip 3".
func CountsString(m map[string]uint64) string {
	if len(m) == 0 {
		return "nothing"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// FastString is "99.9% (bridged 1234, forwarded 5)".
func FastString(c FastPathCounts) string {
	if c.Fast() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% (%s)", 100*float64(c.Fast())/float64(c.Runs()), CountsString(c.FastPathed))
}

func PassedString(c FastPathCounts) string {
	if c.PassedTotal() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%: %s", 100*float64(c.PassedTotal())/float64(c.Runs()), CountsString(c.Passed))
}

// Sum adds what o counted to fp: its counts, by interface role too, and its liberal marks.
func (fp *NodeFastPath) Sum(o *NodeFastPath) {
	fp.Add(o.FastPathCounts)
	fp.CTLiberal += o.CTLiberal
	for role, c := range o.Interfaces {
		if fp.Interfaces == nil {
			fp.Interfaces = map[string]*FastPathCounts{}
		}
		Entry(fp.Interfaces, role).Add(*c)
	}
}

// Roles are the interface roles fp counted, those in order first and in its order, then the
// others by name.
func (fp *NodeFastPath) Roles(order []string) []string {
	at := func(role string) int {
		if i := slices.Index(order, role); i >= 0 {
			return i
		}
		return len(order)
	}
	roles := slices.Sorted(maps.Keys(fp.Interfaces))
	slices.SortStableFunc(roles, func(a, b string) int { return at(a) - at(b) })
	return roles
}
