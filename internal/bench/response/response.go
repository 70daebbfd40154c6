package response

// The response benchmark (the paper's Table VI): how long after a configuration command the
// fast path follows it. Two times per command:
//   event -> data plane: from the moment linuxfp received the command's first netlink event to
//     the moment the data plane reflected all of the command's events (programs installed or
//     replaced, maps updated), from linuxfp's own change records;
//   exit -> fast path: from the moment the command exited to the first packet of a stream that
//     depends on the change being forwarded by the fast path (linuxfp's counters, polled).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Options configure Run.
type Options struct {
	Binary  string // the linuxfp binary to run in the DUT
	Repeats int    // changes per command (>= 50 for the p99 to mean something)
	Only    []string
	// NoLinux skips the baseline: the routed commands again without linuxfp, timing from the
	// command's exit to the first packet Linux delivers through the DUT.
	NoLinux bool
	// LinuxfpLog: a file for linuxfp's own debug log of the run (what it changed, and how long
	// each step took); empty for none.
	LinuxfpLog string
	// NoAfter skips the commands that forbid a stream, counted after their return (see
	// response_after.go); AfterRepeats is their samples per command (default 10).
	NoAfter      bool
	AfterRepeats int
	// NoChurn skips the unrelated churn (see response_churn.go): ChurnRates changes per second
	// (default 10, 100, 1000), each for ChurnSeconds (default 3 s).
	NoChurn      bool
	ChurnRates   []int
	ChurnSeconds float64
}

// Result is one command's distribution.
type Result struct {
	Command        string                `json:"command"`
	Samples        int                   `json:"samples"`
	EventToDP      harness.Distribution  `json:"event_to_dataplane_ms"`
	ExitToFast     *harness.Distribution `json:"exit_to_fastpath_ms,omitempty"`
	ExitToFastNote string                `json:"exit_to_fastpath_note,omitempty"`
	// LinuxExitToDelivered: the same command with Linux alone (no linuxfp), from its exit to the
	// first packet of the stream reaching the sink: what Linux itself needs before traffic flows.
	LinuxExitToDelivered *harness.Distribution `json:"linux_exit_to_delivered_ms,omitempty"`
	// Verifying: samples in which linuxfp had the kernel verify a program (a kind of program no
	// interface had yet); in the others it reused a verified one or changed only maps.
	Verifying int `json:"samples_verifying"`
	// After: for a command that forbids a stream, the stream's packets the sink counted after
	// the command returned. A command measured only so has Samples 0.
	After *AfterReturn `json:"after_return,omitempty"`
	// Churn: for ChurnCommand, one window per rate of unrelated changes.
	Churn []ChurnResult `json:"churn,omitempty"`
}

// responseCase is one kind of configuration change.
type responseCase struct {
	name string
	// prepare runs before each sample (not timed); do is the timed command; undo restores.
	prepare, do, undo func(rc *responseRun, i int) error
	// stream: where packets that depend on the change go (empty: no dependent traffic) and
	// which interface's counter shows them fast-pathed (routed or bridged).
	stream func(i int) (dst string, iface string)
	// genEnd, if set, configures gen's end of an interface the command creates; the stream
	// then starts after the command. Otherwise it runs from before the command.
	genEnd func(rc *responseRun) error
	// drops: the change makes the fast path drop the stream (a filter rule): exit -> fast path
	// is then the time until the first packet dropped at XDP, i.e. the window during which a
	// packet the new rule drops could still be forwarded.
	drops bool
	// routed: the stream is routed to the sink's eth0 (not bridged, not dropped): the Linux
	// baseline times it too.
	routed bool
}

type responseRun struct {
	tb        *testbed.Testbed
	client    *status.Client
	sinkBrMAC string // the sink's bs0 (bridge cases)
}

func (rc *responseRun) dut(cmd string) error {
	_, err := rc.tb.DUT.Run(strings.Fields(cmd)...)
	return err
}

func responseCases() []responseCase {
	return []responseCase{
		{
			name:   "ip route add",
			routed: true,
			do: func(rc *responseRun, i int) error {
				return rc.dut(fmt.Sprintf("ip route add 198.19.%d.0/24 via 198.18.1.2", 100+i%100))
			},
			undo: func(rc *responseRun, i int) error {
				return rc.dut(fmt.Sprintf("ip route del 198.19.%d.0/24", 100+i%100))
			},
			stream: func(i int) (string, string) { return fmt.Sprintf("198.19.%d.1", 100+i%100), "in0" },
		},
		{
			// The sink owns 198.18.9.2/24 on its side; the DUT's address makes it reachable.
			name:   "ip addr add",
			routed: true,
			do:     func(rc *responseRun, i int) error { return rc.dut("ip addr add 198.18.9.1/24 dev out0") },
			undo:   func(rc *responseRun, i int) error { return rc.dut("ip addr del 198.18.9.1/24 dev out0") },
			stream: func(i int) (string, string) { return "198.18.9.2", "in0" },
		},
		{
			name:    "ip link set down",
			prepare: nil,
			do:      func(rc *responseRun, i int) error { return rc.dut("ip link set out0 down") },
			undo: func(rc *responseRun, i int) error {
				return rc.dut("ip link set out0 up")
			},
		},
		{
			name:    "ip link set up",
			routed:  true,
			prepare: func(rc *responseRun, i int) error { return rc.dut("ip link set out0 down") },
			do:      func(rc *responseRun, i int) error { return rc.dut("ip link set out0 up") },
			undo:    func(rc *responseRun, i int) error { return nil },
			// The connected route comes back with the link; the neighbour is resolved again.
			stream: func(i int) (string, string) { return "198.18.1.2", "in0" },
		},
		{
			// A new interface towards gen, created, addressed and brought up by one
			// `ip -batch` in the DUT; its program is what is timed, then packets arriving on it.
			name:   "ip link add",
			routed: true,
			do: func(rc *responseRun, i int) error {
				cmd := exec.Command("ip", "netns", "exec", rc.tb.DUT.Name, "ip", "-batch", "-")
				cmd.Stdin = strings.NewReader("link add new0 type veth peer name new0 netns " + rc.tb.Gen.Name +
					"\naddr add 198.18.8.1/24 dev new0\nlink set new0 up\n")
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("ip -batch: %w: %s", err, out)
				}
				return nil
			},
			undo: func(rc *responseRun, i int) error { return rc.dut("ip link del new0") },
			// The gen side is configured through netlink after the command (see measure).
			stream: func(i int) (string, string) { return "198.18.1.2", "new0" },
			genEnd: func(rc *responseRun) error { return configureGenEnd(rc.tb.Gen, "new0") },
		},
	}
}

// Filter cases: on the routed path, while gen streams to a routed prefix. Earlier cases took out0
// down and up, which removed the testbed's routes via the sink: each case puts back the one its
// stream needs first.
func filterCases() []responseCase {
	cases := []responseCase{
		{
			// The paper's `iptables -d 10.10.3.0/24 -A FORWARD -j DROP`, in our range.
			name:   "iptables -A FORWARD -d ... -j DROP",
			do:     func(rc *responseRun, i int) error { return rc.dut("iptables -A FORWARD -d 198.19.30.0/24 -j DROP") },
			undo:   func(rc *responseRun, i int) error { return rc.dut("iptables -D FORWARD -d 198.19.30.0/24 -j DROP") },
			stream: func(i int) (string, string) { return "198.19.30.1", "in0" },
			drops:  true,
		},
		{
			// The rule exists; the address joins its set (ipset sends no event: polled).
			name: "ipset add",
			prepare: func(rc *responseRun, i int) error {
				return rc.dutScript("ipset create lfpresp hash:ip\niptables -A FORWARD -m set --match-set lfpresp dst -j DROP")
			},
			do: func(rc *responseRun, i int) error { return rc.dut("ipset add lfpresp 198.19.31.1") },
			undo: func(rc *responseRun, i int) error {
				return rc.dutScript("iptables -D FORWARD -m set --match-set lfpresp dst -j DROP\nipset destroy lfpresp")
			},
			stream: func(i int) (string, string) { return "198.19.31.1", "in0" },
			drops:  true,
		},
		{
			name: "ipset del",
			prepare: func(rc *responseRun, i int) error {
				return rc.dutScript("ipset create lfpresp hash:ip\nipset add lfpresp 198.19.31.1\n" +
					"iptables -A FORWARD -m set --match-set lfpresp dst -j DROP")
			},
			do: func(rc *responseRun, i int) error { return rc.dut("ipset del lfpresp 198.19.31.1") },
			undo: func(rc *responseRun, i int) error {
				return rc.dutScript("iptables -D FORWARD -m set --match-set lfpresp dst -j DROP\nipset destroy lfpresp")
			},
			stream: func(i int) (string, string) { return "198.19.31.1", "in0" },
		},
		{
			// 10,000 blacklist rules restored at once; the stream's destination is the last.
			name: "iptables-restore 10000 rules",
			do: func(rc *responseRun, i int) error {
				return harness.Restore(rc.tb.DUT, harness.DropRules(10000, blacklistAddr), "iptables-restore")
			},
			undo:   func(rc *responseRun, i int) error { return rc.dut("iptables -F FORWARD") },
			stream: func(i int) (string, string) { return blacklistLast, "in0" },
			drops:  true,
		},
	}
	for i := range cases {
		prepare := cases[i].prepare
		cases[i].prepare = func(rc *responseRun, n int) error {
			if err := rc.dutScript("ip route replace 198.19.30.0/24 via 198.18.1.2\n" +
				"ip route replace 198.19.31.0/24 via 198.18.1.2\nip route replace 198.19.39.0/24 via 198.18.1.2"); err != nil {
				return err
			}
			if prepare != nil {
				return prepare(rc, n)
			}
			return nil
		}
	}
	return cases
}

// blacklistAddr is the i-th address of the 10,000 DROP rules, 198.19.(i/256).(i%256) (the routed
// prefixes); blacklistLast is the last's.
func blacklistAddr(i int) netip.Addr { return testbed.Prefix4(i/256, i%256) }

const blacklistLast = "198.19.39.15"

// Bridge cases: a second path gen bg0 <-> bgen [DUT] bsink <-> bs0 sink (198.18.20.0/24), made a
// bridge's ports by the commands (see setupBridgePath). The stream goes to 198.18.20.9, an
// address gen's neighbour table maps to the sink's MAC and the sink does not own: the sink never
// answers, so the bridge learns its MAC only from what the command does.
const (
	bridgeStreamDst = "198.18.20.9"
	brName          = "brx"
)

func bridgeCases() []responseCase {
	return []responseCase{
		{
			name: "brctl addbr",
			do:   func(rc *responseRun, i int) error { return rc.dut("brctl addbr " + brName) },
			undo: func(rc *responseRun, i int) error { return rc.dut("brctl delbr " + brName) },
		},
		{
			// The sink's port is in the bridge and its address static; gen's port joins.
			name: "brctl addif",
			prepare: func(rc *responseRun, i int) error {
				return rc.dutScript("brctl addbr " + brName + "\nbrctl addif " + brName + " bsink\nip link set " + brName + " up\n" +
					"bridge fdb replace " + rc.sinkBrMAC + " dev bsink master static")
			},
			do: func(rc *responseRun, i int) error { return rc.dut("brctl addif " + brName + " bgen") },
			undo: func(rc *responseRun, i int) error {
				return rc.dutScript("ip link set " + brName + " down\nbrctl delbr " + brName)
			},
			stream: func(i int) (string, string) { return bridgeStreamDst, "bgen" },
		},
		{
			// Both ports in the bridge, gen's address learned from the stream, the sink's
			// unknown (frames to it are flooded by Linux) until the command.
			name: "bridge fdb add",
			prepare: func(rc *responseRun, i int) error {
				return rc.dutScript("brctl addbr " + brName + "\nbrctl addif " + brName + " bsink\nbrctl addif " + brName + " bgen\n" +
					"ip link set " + brName + " up")
			},
			do: func(rc *responseRun, i int) error {
				return rc.dut("bridge fdb add " + rc.sinkBrMAC + " dev bsink master static")
			},
			undo: func(rc *responseRun, i int) error {
				return rc.dutScript("ip link set " + brName + " down\nbrctl delbr " + brName)
			},
			stream: func(i int) (string, string) { return bridgeStreamDst, "bgen" },
		},
		{
			// Port removal: what is timed is the data plane forgetting the port (nothing may be
			// switched to it afterwards).
			name: "brctl delif",
			prepare: func(rc *responseRun, i int) error {
				return rc.dutScript("brctl addbr " + brName + "\nbrctl addif " + brName + " bsink\nbrctl addif " + brName + " bgen\n" +
					"ip link set " + brName + " up\nbridge fdb replace " + rc.sinkBrMAC + " dev bsink master static")
			},
			do: func(rc *responseRun, i int) error { return rc.dut("brctl delif " + brName + " bsink") },
			undo: func(rc *responseRun, i int) error {
				return rc.dutScript("ip link set " + brName + " down\nbrctl delbr " + brName)
			},
		},
	}
}

// setupBridgePath creates the veths of the bridge cases (not timed).
func (rc *responseRun) setupBridgePath() error {
	tb := rc.tb
	if err := rc.dutScript("ip link add bgen type veth peer name bg0 netns " + tb.Gen.Name + "\n" +
		"ip link add bsink type veth peer name bs0 netns " + tb.Sink.Name + "\nip link set bgen up\nip link set bsink up\n" +
		"ethtool -K bgen gro on\nethtool -K bsink gro on"); err != nil {
		return err
	}
	// No IPv6 on bs0: its router solicitations and MLD reports would teach the bridge the sink's
	// MAC by themselves (and `bridge fdb add` would then fail with EEXIST).
	if err := tb.Sink.Script("sysctl -qw net.ipv6.conf.bs0.disable_ipv6=1\nip link set bs0 up\nethtool -K bs0 gro on tx off\nip addr add 198.18.20.3/24 dev bs0"); err != nil {
		return err
	}
	out, err := tb.Sink.Run("cat", "/sys/class/net/bs0/address")
	if err != nil {
		return err
	}
	rc.sinkBrMAC = strings.TrimSpace(out)
	return tb.Gen.Script("ip link set bg0 up\nethtool -K bg0 gro on tx off\nip addr add 198.18.20.2/24 dev bg0\n" +
		"ip neigh replace " + bridgeStreamDst + " lladdr " + rc.sinkBrMAC + " dev bg0 nud permanent")
}

func (rc *responseRun) dutScript(script string) error { return rc.tb.DUT.Script(script) }

// Run runs the benchmark. It returns nothing when it fails or ctx is cancelled half-way.
func Run(ctx context.Context, o Options) (Results, error) {
	if o.Repeats == 0 {
		o.Repeats = 50
	}
	if o.AfterRepeats == 0 {
		o.AfterRepeats = 10
	}
	if len(o.ChurnRates) == 0 {
		o.ChurnRates = []int{10, 100, 1000}
	}
	if o.ChurnSeconds == 0 {
		o.ChurnSeconds = 3
	}
	tb, err := testbed.New("lfp-resp", testbed.Options{})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	if err := tb.Sink.Script("ip addr add 198.18.9.2/24 dev eth0"); err != nil {
		return nil, err
	}
	if err := tb.ResolveNeighbours(); err != nil {
		return nil, err
	}
	var args []string
	if o.LinuxfpLog != "" {
		args = []string{"--log-level", "debug"}
	}
	l, err := tb.StartLinuxfp(o.Binary, args...)
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	if o.LinuxfpLog != "" {
		defer func() {
			if err := os.WriteFile(o.LinuxfpLog, []byte(l.Log.String()), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "linuxfp log:", err)
			}
		}()
	}
	rc := &responseRun{tb: tb, client: l.Client}
	if err := rc.setupBridgePath(); err != nil {
		return nil, fmt.Errorf("bridge cases: %w", err)
	}
	if err := rc.settle(); err != nil {
		return nil, err
	}

	var results Results
	cases := append(responseCases(), bridgeCases()...)
	for _, c := range append(cases, filterCases()...) {
		if len(o.Only) > 0 && !slices.Contains(o.Only, c.name) {
			continue
		}
		res, err := rc.measure(ctx, c, o.Repeats)
		if err != nil {
			return nil, fmt.Errorf("%s: %w\nlinuxfp log:\n%s", c.name, err, lastLines(l.Log.String(), 30))
		}
		results = append(results, res)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	var after []afterCase
	if !o.NoAfter {
		for _, c := range afterCases() {
			if len(o.Only) == 0 || slices.Contains(o.Only, c.name) {
				after = append(after, c)
			}
		}
	}
	if len(after) > 0 && ctx.Err() == nil {
		sk, err := harness.AttachSink(rc.tb.Sink, "eth0")
		if err != nil {
			return nil, err
		}
		st, err := rc.client.Status()
		if err != nil {
			sk.Close()
			return nil, err
		}
		for _, c := range after {
			pa, held, fenced, notes, err := rc.measureAfter(ctx, c, o.AfterRepeats, sk, rc.client)
			if err != nil {
				sk.Close()
				return nil, fmt.Errorf("%s, after its return: %w\nlinuxfp log:\n%s", c.name, err, lastLines(l.Log.String(), 30))
			}
			ar := &AfterReturn{Samples: o.AfterRepeats, Linuxfp: pa, FencedPackets: fenced, Notes: notes}
			if !st.FenceWatch {
				ar.Notes = append(ar.Notes, "linuxfp's fence is off here")
			}
			if len(held) > 0 {
				d := harness.DistributionOf(held)
				ar.Fence = &d
			}
			results = withAfter(results, c.name, ar)
		}
		sk.Close()
	}
	if !o.NoChurn && ctx.Err() == nil && (len(o.Only) == 0 || slices.Contains(o.Only, ChurnCommand)) {
		rows, err := rc.measureChurn(ctx, o.ChurnRates, time.Duration(o.ChurnSeconds*float64(time.Second)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w\nlinuxfp log:\n%s", ChurnCommand, err, lastLines(l.Log.String(), 30))
		}
		results = append(results, Result{Command: ChurnCommand, Churn: rows})
	}
	if !o.NoLinux && ctx.Err() == nil {
		// The baseline: the same routed commands with Linux alone.
		if err := l.Stop(); err != nil {
			return nil, fmt.Errorf("stop linuxfp for the Linux baseline: %w", err)
		}
		for i := range results {
			for _, c := range cases {
				if c.name != results[i].Command || !c.routed {
					continue
				}
				d, err := rc.linuxBaseline(ctx, c, o.Repeats)
				if err != nil {
					return nil, fmt.Errorf("%s, Linux alone: %w", c.name, err)
				}
				results[i].LinuxExitToDelivered = &d
			}
		}
		if len(after) > 0 {
			sk, err := harness.AttachSink(rc.tb.Sink, "eth0")
			if err != nil {
				return nil, err
			}
			for _, c := range after {
				pa, _, _, _, err := rc.measureAfter(ctx, c, o.AfterRepeats, sk, nil)
				if err != nil {
					sk.Close()
					return nil, fmt.Errorf("%s, after its return, Linux alone: %w", c.name, err)
				}
				for i := range results {
					if results[i].Command == c.name && results[i].After != nil {
						results[i].After.Linux = &pa
					}
				}
			}
			sk.Close()
		}
	}
	return results, nil
}

// withAfter gives the result of command name (a new one, if it was not measured otherwise) ar.
func withAfter(results Results, name string, ar *AfterReturn) Results {
	for i := range results {
		if results[i].Command == name {
			results[i].After = ar
			return results
		}
	}
	return append(results, Result{Command: name, After: ar})
}

// Results are every command's results, in the order measured. The JSON form is for scripts.
type Results []Result

// Measured: some command was measured.
func (results Results) Measured() bool { return len(results) > 0 }

// WriteTable writes the tables a person reads.
func (results Results) WriteTable(w io.Writer) {
	var notes []string
	// Every timed command was measured as many times (--repeats).
	if i := slices.IndexFunc(results, func(r Result) bool { return r.Samples > 0 }); i >= 0 {
		writeResponseTimes(w, results, results[i].Samples, &notes)
	}
	writeAfter(w, results, &notes)
	writeChurn(w, results)
	for _, n := range notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func writeResponseTimes(w io.Writer, results []Result, repeats int, notes *[]string) {
	fmt.Fprintf(w, "Response time (paper Table VI: 0.5-1.0 s), %d changes per command, ms\n", repeats)
	tw := harness.NewTable(w, "command", "event->dataplane p50", "p99", "max", "exit->fast path p50", "p99", "max", "verifying")
	for _, r := range results {
		if r.Samples == 0 {
			continue
		}
		if r.ExitToFastNote != "" {
			*notes = append(*notes, r.Command+": "+r.ExitToFastNote)
		}
		fast := "-\t-\t-"
		if r.ExitToFast != nil {
			fast = fmt.Sprintf("%.2f\t%.2f\t%.2f", r.ExitToFast.P50, r.ExitToFast.P99, r.ExitToFast.Max)
		}
		tw.Rowf("%s\t%.2f\t%.2f\t%.2f\t%s\t%d", r.Command, r.EventToDP.P50, r.EventToDP.P99, r.EventToDP.Max, fast, r.Verifying)
	}
	tw.Flush()
	fmt.Fprintln(w, "exit->fast path includes what Linux must do first (e.g. resolve the neighbour by ARP).")
	fmt.Fprintln(w, "verifying: changes for which the kernel verified a program (a kind no interface had yet); the others")
	fmt.Fprintln(w, "reused a verified program of the same kind, or changed only maps.")
	var linux []Result
	for _, r := range results {
		if r.LinuxExitToDelivered != nil {
			linux = append(linux, r)
		}
	}
	if len(linux) > 0 {
		fmt.Fprintln(w, "\nLinux alone (no linuxfp), the routed commands again: from the command's exit to the first packet of")
		fmt.Fprintln(w, "the stream delivered to the sink, ms (what Linux itself needs before any traffic flows)")
		tw := harness.NewTable(w, "command", "exit->delivered p50", "p99", "max")
		for _, r := range linux {
			d := r.LinuxExitToDelivered
			tw.Rowf("%s\t%.2f\t%.2f\t%.2f", r.Command, d.P50, d.P99, d.Max)
		}
		tw.Flush()
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (rc *responseRun) lastSeq() (uint64, error) {
	st, err := rc.client.Status()
	if err != nil {
		return 0, err
	}
	return st.Applies, nil
}

// settle waits until linuxfp has had no event for a while, so a sample starts from quiet.
func (rc *responseRun) settle() error {
	var last uint64
	stable := 0
	for i := 0; i < 500 && stable < 5; i++ {
		st, err := rc.client.Status()
		if err != nil {
			return err
		}
		if st.Events == last && !st.Busy {
			stable++
		} else {
			stable = 0
			last = st.Events
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func (rc *responseRun) forwarded(iface string, drops bool) (uint64, bool) {
	st, err := rc.client.Status()
	if err != nil {
		return 0, false
	}
	for _, it := range st.Interfaces {
		if it.Name == iface {
			if drops {
				return it.Dropped.Packets, true
			}
			return it.Forwarded.Packets + it.Bridged.Packets, true
		}
	}
	return 0, false
}

func (rc *responseRun) measure(ctx context.Context, c responseCase, n int) (Result, error) {
	res := Result{Command: c.name, Samples: n}
	var evDP, exitFast []time.Duration
	timeouts := 0
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if c.prepare != nil {
			if err := c.prepare(rc, i); err != nil {
				return res, err
			}
		}
		if err := rc.settle(); err != nil {
			return res, err
		}
		var stop func()
		var dst, iface string
		if c.stream != nil {
			dst, iface = c.stream(i)
		}
		before, err := rc.lastSeq()
		if err != nil {
			return res, err
		}
		start := time.Now()
		if dst != "" && c.genEnd == nil {
			stop = harness.StartStream(rc.tb.Gen, dst)
		}
		base, _ := rc.forwarded(iface, c.drops)
		if err := c.do(rc, i); err != nil {
			if stop != nil {
				stop()
			}
			return res, err
		}
		exit := time.Now()
		if dst != "" && c.genEnd != nil {
			// The stream can only start once the new interface exists: configure its gen end
			// (through netlink, in well under a millisecond) and start.
			if err := c.genEnd(rc); err != nil {
				return res, err
			}
			stop = harness.StartStream(rc.tb.Gen, dst)
			base = 0
		}
		if dst != "" {
			if took, ok := waitAbove(exit, base, func() (uint64, bool) { return rc.forwarded(iface, c.drops) }); ok {
				exitFast = append(exitFast, took)
			} else {
				timeouts++
			}
			stop()
		}
		if err := rc.settle(); err != nil {
			return res, err
		}
		changes, err := rc.client.Changes(before)
		if err != nil {
			return res, err
		}
		var first, applied time.Time
		verifying := false
		for _, ch := range changes {
			if ch.FirstEvent.Before(start) || ch.FirstEvent.After(exit.Add(50*time.Millisecond)) {
				continue // not caused by the command
			}
			if first.IsZero() {
				first = ch.FirstEvent
			}
			applied = ch.Applied
			verifying = verifying || ch.Verified > 0
		}
		if verifying {
			res.Verifying++
		}
		if !first.IsZero() {
			evDP = append(evDP, applied.Sub(first))
		} else if os.Getenv("LFP_DEBUG_RESPONSE") != "" {
			fmt.Fprintf(os.Stderr, "%s sample %d: start %s exit %s, no change in window: %+v\n", c.name, i, start.Format("15:04:05.000000"), exit.Format("15:04:05.000000"), changes)
		}
		if err := c.undo(rc, i); err != nil {
			return res, err
		}
	}
	res.EventToDP = harness.DistributionOf(evDP)
	if c.stream != nil {
		d := harness.DistributionOf(exitFast)
		res.ExitToFast = &d
		if timeouts > 0 {
			res.ExitToFastNote = fmt.Sprintf("%d of %d samples saw no fast-pathed packet within %s", timeouts, n, responseWait)
		}
	}
	return res, nil
}

// linuxBaseline times c with Linux alone (linuxfp stopped): from the command's exit to the first
// frame of the stream the sink counts (an XDP counter on its eth0: UDP to port 9 only). A sample
// that sees none within 3 s counts as 3 s.
func (rc *responseRun) linuxBaseline(ctx context.Context, c responseCase, n int) (harness.Distribution, error) {
	sk, err := harness.AttachSink(rc.tb.Sink, "eth0")
	if err != nil {
		return harness.Distribution{}, err
	}
	defer sk.Close()
	var samples []time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if c.prepare != nil {
			if err := c.prepare(rc, i); err != nil {
				return harness.Distribution{}, err
			}
		}
		time.Sleep(20 * time.Millisecond) // the previous sample's packets are gone
		dst, _ := c.stream(i)
		stop := func() {}
		if c.genEnd == nil {
			stop = harness.StartStream(rc.tb.Gen, dst)
			time.Sleep(2 * time.Millisecond) // streaming before the command
		}
		base, err := sk.Read()
		if err != nil {
			stop()
			return harness.Distribution{}, err
		}
		if err := c.do(rc, i); err != nil {
			stop()
			return harness.Distribution{}, err
		}
		exit := time.Now()
		if c.genEnd != nil {
			if err := c.genEnd(rc); err != nil {
				return harness.Distribution{}, err
			}
			stop = harness.StartStream(rc.tb.Gen, dst)
		}
		took, ok := waitAbove(exit, base.Packets, func() (uint64, bool) {
			got, err := sk.Read()
			return got.Packets, err == nil
		})
		if !ok {
			took = responseWait
		}
		samples = append(samples, took)
		stop()
		if err := c.undo(rc, i); err != nil {
			return harness.Distribution{}, err
		}
	}
	return harness.DistributionOf(samples), nil
}

// responseWait: how long a sample waits for its stream's first packet after the command.
const responseWait = 3 * time.Second

// waitAbove polls read every 0.2 ms until it gives more than base, for up to responseWait after
// exit: how long after exit that was, and whether it was.
func waitAbove(exit time.Time, base uint64, read func() (uint64, bool)) (time.Duration, bool) {
	for time.Now().Before(exit.Add(responseWait)) {
		if n, ok := read(); ok && n > base {
			return time.Since(exit), true
		}
		time.Sleep(200 * time.Microsecond)
	}
	return 0, false
}

// configureGenEnd gives gen's end of a new link 198.18.8.2/24 and routes the sink through it.
func configureGenEnd(gen *nsutil.NS, name string) error {
	return gen.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr("198.18.8.2/24")
		if err := netlink.AddrAdd(l, a); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("198.18.1.2/32")
		return netlink.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: net.ParseIP("198.18.8.1")})
	})
}
