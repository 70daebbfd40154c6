package response

// After the command returns: for commands that forbid a stream (a DROP rule, an address joining
// a set a DROP rule matches, a blackhole route), how many of the stream's packets the sink still
// counted after the command had returned. Linux applies such a change before the command's
// sendmsg() returns, so with Linux alone that is the handful in flight at most; linuxfp's fence
// hands the family to Linux from the same moment until the data plane follows, so it must be the
// same. The time the fence held the family on Linux's path is measured too.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/status"
)

// AfterReturn is one command's stream packets after its return, with linuxfp and Linux alone.
type AfterReturn struct {
	Samples int `json:"samples"`
	// Linuxfp and Linux: the stream's packets the sink counted after the command returned
	// (read right at its exit, and again once the stream had settled and stopped).
	Linuxfp PacketsAfter  `json:"linuxfp"`
	Linux   *PacketsAfter `json:"linux,omitempty"`
	// Fence: from the command's exit until linuxfp's status no longer listed a family as fenced
	// (polled), over the samples in which the fence held (a family listed, or in0 passed
	// packets as fenced); FencedPackets: in0's packets passed
	// to Linux as `fenced` meanwhile, summed over the samples.
	Fence         *harness.Distribution `json:"fence_held_ms,omitempty"`
	FencedPackets uint64                `json:"fenced_packets"`
	// Notes: samples that could not be measured as meant (no fast path before the command, the
	// fence off or already open at the exit).
	Notes []string `json:"notes,omitempty"`
}

// PacketsAfter sums the packets counted after the command over the samples.
type PacketsAfter struct {
	Total uint64 `json:"total"`
	// MaxSample: the most of one sample; SamplesWith: the samples with any.
	MaxSample   uint64 `json:"max_sample"`
	SamplesWith int    `json:"samples_with_any"`
}

func (p *PacketsAfter) add(n uint64) {
	p.Total += n
	p.MaxSample = max(p.MaxSample, n)
	if n > 0 {
		p.SamplesWith++
	}
}

// afterCase is a command that forbids the stream to dst; prepare (not timed) makes dst routed to
// the sink first.
type afterCase struct {
	name, dst         string
	prepare, do, undo string
}

func afterCases() []afterCase {
	route := func(prefix string) string { return "ip route replace " + prefix + " via 198.18.1.2" }
	return []afterCase{
		{
			name: "iptables -A FORWARD -d ... -j DROP", dst: "198.19.33.1",
			prepare: route("198.19.33.0/24"),
			do:      "iptables -A FORWARD -d 198.19.33.1 -j DROP",
			undo:    "iptables -D FORWARD -d 198.19.33.1 -j DROP",
		},
		{
			name: "ipset add", dst: "198.19.34.1",
			prepare: route("198.19.34.0/24") + "\nipset create lfpafter hash:ip\n" +
				"iptables -A FORWARD -m set --match-set lfpafter dst -j DROP",
			do:   "ipset add lfpafter 198.19.34.1",
			undo: "iptables -D FORWARD -m set --match-set lfpafter dst -j DROP\nipset destroy lfpafter",
		},
		{
			name: "ip route replace blackhole", dst: "198.19.35.1",
			prepare: route("198.19.35.0/24"),
			do:      "ip route replace blackhole 198.19.35.0/24",
			undo:    "ip route del 198.19.35.0/24",
		},
	}
}

// afterSettle: how long the stream runs after the command (after the fence opened, with
// linuxfp) before it stops; afterDrain: how long after it stops the sink is read again (a
// datagram in flight through veths takes microseconds).
const (
	afterSettle = 30 * time.Millisecond
	afterDrain  = 5 * time.Millisecond
)

// measureAfter runs c n times. With client (linuxfp runs), the stream must be fast-pathed by in0
// before the command, and the fence is timed; without, Linux alone forwards it.
func (rc *responseRun) measureAfter(ctx context.Context, c afterCase, n int, sk *harness.Sink, client *status.Client) (PacketsAfter, []time.Duration, uint64, []string, error) {
	var pa PacketsAfter
	var held []time.Duration
	var fenced uint64
	noFast, noFence := 0, 0
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if err := rc.dutScript(c.prepare); err != nil {
			return pa, nil, 0, nil, err
		}
		if client != nil {
			if err := rc.settle(); err != nil {
				return pa, nil, 0, nil, err
			}
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		base, err := sk.Read()
		if err != nil {
			return pa, nil, 0, nil, err
		}
		stop := harness.StartStream(rc.tb.Gen, c.dst)
		// Before the command the stream reaches the sink, through the fast path with linuxfp.
		if _, ok := waitAbove(time.Now(), base.Packets, func() (uint64, bool) { got, err := sk.Read(); return got.Packets, err == nil }); !ok {
			stop()
			return pa, nil, 0, nil, fmt.Errorf("sample %d: the stream to %s never reached the sink", i, c.dst)
		}
		var fencedBase uint64
		if client != nil {
			fwd, _ := rc.forwarded("in0", false)
			if _, ok := waitAbove(time.Now(), fwd, func() (uint64, bool) { return rc.forwarded("in0", false) }); !ok {
				noFast++
			}
			fencedBase = rc.fencedCount(client)
		}
		if err := rc.dut(c.do); err != nil {
			stop()
			return pa, nil, 0, nil, err
		}
		exit := time.Now()
		atExit, err := sk.Read()
		if err != nil {
			stop()
			return pa, nil, 0, nil, err
		}
		var heldFor time.Duration
		seen := false
		if client != nil {
			heldFor, seen = fenceHeld(client, exit)
		}
		time.Sleep(afterSettle)
		stop()
		time.Sleep(afterDrain)
		after, err := sk.Read()
		if err != nil {
			return pa, nil, 0, nil, err
		}
		pa.add(after.Packets - atExit.Packets)
		if client != nil {
			// The status may answer only once the apply is done: in0's fenced packets show the
			// fence held then as well.
			got := rc.fencedCount(client) - fencedBase
			fenced += got
			if (seen || got > 0) && heldFor > 0 {
				held = append(held, heldFor)
			} else {
				noFence++
			}
		}
		if err := rc.dutScript(c.undo); err != nil {
			return pa, nil, 0, nil, err
		}
	}
	var notes []string
	if noFast > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d samples: in0 fast-pathed none of the stream before the command", noFast, n))
	}
	if noFence > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d samples: neither a family listed fenced nor a packet fenced after the command (or the fence still closed after %s)", noFence, n, responseWait))
	}
	return pa, held, fenced, notes, nil
}

// fenceHeld polls linuxfp's status from exit until it lists no fenced family: how long after
// exit that was (0 if the fence did not open within responseWait), and whether a poll saw a
// family fenced.
func fenceHeld(client *status.Client, exit time.Time) (time.Duration, bool) {
	seen := false
	for time.Now().Before(exit.Add(responseWait)) {
		st, err := client.Status()
		if err != nil {
			return 0, seen
		}
		if len(st.Fenced) == 0 {
			return time.Since(exit), seen
		}
		seen = true
	}
	return 0, seen
}

// fencedCount is in0's packets passed to Linux as `fenced`.
func (rc *responseRun) fencedCount(client *status.Client) uint64 {
	st, err := client.Status()
	if err != nil {
		return 0
	}
	for _, it := range st.Interfaces {
		if it.Name == "in0" {
			return it.Passed["fenced"].Packets
		}
	}
	return 0
}

// writeAfter writes the table of the commands counted after their return, if any were.
func writeAfter(w io.Writer, results []Result, notes *[]string) {
	var rows []Result
	for _, r := range results {
		if r.After != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nAfter the command returns: packets of a 10 kpps stream the sink counted after a command that forbids\n")
	fmt.Fprintf(w, "the stream returned (read at its exit, and once the stream settled), summed over %d samples per command;\n", rows[0].After.Samples)
	fmt.Fprintln(w, "want 0, as with Linux alone. fence held: from the exit until linuxfp's status listed no fenced family, ms")
	tw := harness.NewTable(w, "command", "Linux alone after exit", "max/sample", "linuxfp after exit", "max/sample", "fence held p50", "p99", "max", "fenced packets")
	var flags []string
	for _, r := range rows {
		a := r.After
		linux := "-\t-"
		if a.Linux != nil {
			linux = fmt.Sprintf("%d\t%d", a.Linux.Total, a.Linux.MaxSample)
		}
		fence := "-\t-\t-"
		if a.Fence != nil {
			fence = fmt.Sprintf("%.2f\t%.2f\t%.2f", a.Fence.P50, a.Fence.P99, a.Fence.Max)
		}
		tw.Rowf("%s\t%s\t%d\t%d\t%s\t%d", r.Command, linux, a.Linuxfp.Total, a.Linuxfp.MaxSample, fence, a.FencedPackets)
		if a.Linuxfp.Total > 0 && (a.Linux == nil || a.Linuxfp.Total > a.Linux.Total) {
			than := ""
			if a.Linux != nil {
				than = fmt.Sprintf(" (Linux alone: %d)", a.Linux.Total)
			}
			flags = append(flags, fmt.Sprintf("! %s: the sink counted %d packets after the command returned with linuxfp, in %d of %d samples%s",
				r.Command, a.Linuxfp.Total, a.Linuxfp.SamplesWith, a.Samples, than))
		}
		for _, n := range a.Notes {
			*notes = append(*notes, r.Command+" (after its return): "+n)
		}
	}
	tw.Flush()
	for _, f := range flags {
		fmt.Fprintln(w, f)
	}
}
