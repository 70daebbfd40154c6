package response

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// report is results' tables, and a check that they have a line want (each line's runs of spaces
// made one).
func report(t *testing.T, results Results) (out string, has func(want string)) {
	var b bytes.Buffer
	results.WriteTable(&b)
	out = b.String()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return out, func(want string) {
		t.Helper()
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}

func TestResponseAfterReport(t *testing.T) {
	var pa PacketsAfter
	for _, n := range []uint64{0, 3, 0, 1} {
		pa.add(n)
	}
	if pa != (PacketsAfter{Total: 4, MaxSample: 3, SamplesWith: 2}) {
		t.Errorf("packets after %+v, want 4 in all, 3 at most, in 2 samples", pa)
	}

	fence := &harness.Distribution{P50: 2.5, P99: 4.25, Max: 4.25}
	results := Results{
		{Command: "ip route add", Samples: 5, EventToDP: harness.Distribution{P50: 2, P99: 3, Max: 3}},
		{Command: "iptables -A FORWARD -d ... -j DROP", Samples: 5, EventToDP: harness.Distribution{P50: 2, P99: 3, Max: 3}},
	}
	results = withAfter(results, "iptables -A FORWARD -d ... -j DROP", &AfterReturn{Samples: 4,
		Linuxfp: PacketsAfter{}, Linux: &PacketsAfter{}, Fence: fence, FencedPackets: 120})
	results = withAfter(results, "ip route replace blackhole", &AfterReturn{Samples: 4,
		Linuxfp: pa, Linux: &PacketsAfter{Total: 1, MaxSample: 1, SamplesWith: 1}, Fence: fence, FencedPackets: 80})
	results = withAfter(results, "ipset add", &AfterReturn{Samples: 4,
		Notes: []string{"4 of 4 samples: no family fenced at the command's exit (or still after 3s)"}})
	if len(results) != 4 || results[1].After == nil || results[1].Samples != 5 {
		t.Fatalf("withAfter: %+v, want the timed command's result to carry it and two results more", results)
	}

	out, has := report(t, results)
	has("Response time (paper Table VI: 0.5-1.0 s), 5 changes per command, ms")
	has("iptables -A FORWARD -d ... -j DROP 2.00 3.00 3.00 - - - 0")
	has("command Linux alone after exit max/sample linuxfp after exit max/sample fence held p50 p99 max fenced packets")
	has("iptables -A FORWARD -d ... -j DROP 0 0 0 0 2.50 4.25 4.25 120")
	has("ip route replace blackhole 1 1 4 3 2.50 4.25 4.25 80")
	has("ipset add - - 0 0 - - - 0")
	has("! ip route replace blackhole: the sink counted 4 packets after the command returned with linuxfp, in 2 of 4 samples (Linux alone: 1)")
	has("note: ipset add (after its return): 4 of 4 samples: no family fenced at the command's exit (or still after 3s)")
	if strings.Contains(out, "! iptables") || strings.Contains(out, "! ipset") {
		t.Errorf("flagged a command with no packet after its return:\n%s", out)
	}
	// The commands measured only after their return have no row among the times.
	if i := strings.Index(out, "After the command returns"); i < 0 || strings.Contains(out[:i], "blackhole") || strings.Contains(out[:i], "ipset add") {
		t.Errorf("a command not timed has a row among the times:\n%s", out)
	}

	// Only commands counted after their return: no empty table of times.
	if out, _ := report(t, results[2:]); strings.Contains(out, "Response time") || !strings.Contains(out, "After the command returns") {
		t.Errorf("after-only run:\n%s", out)
	}

	j, err := json.Marshal(results[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"after_return":{"samples":4`, `"linuxfp":{"total":4,"max_sample":3,"samples_with_any":2}`,
		`"linux":{"total":1`, `"fence_held_ms":{"p50":2.5`, `"fenced_packets":80`} {
		if !strings.Contains(string(j), f) {
			t.Errorf("JSON has no %s: %s", f, j)
		}
	}
}

func TestResponseChurnReport(t *testing.T) {
	rows := []ChurnResult{
		{Rate: 10, Achieved: 10, Changes: 20, Seconds: 2, Forwarded: 900, Passed: 100, Fenced: 80, Delivered: 1000, CPU: 0.1},
		{Rate: 1000, Achieved: 312.4, Changes: 625, Seconds: 2, Forwarded: 0, Passed: 500, Fenced: 500, Delivered: 498, CPU: 1.5, Errors: 2},
	}
	if rows[0].FastShare() != 0.9 || rows[0].FencedShare() != 0.08 || (ChurnResult{}).FastShare() != 0 {
		t.Errorf("shares %v %v, want 0.9 and 0.08, and 0 of no packet", rows[0].FastShare(), rows[0].FencedShare())
	}
	results := Results{
		{Command: "ip route add", Samples: 5, EventToDP: harness.Distribution{P50: 2, P99: 3, Max: 3}},
		{Command: ChurnCommand, Churn: rows},
	}
	out, has := report(t, results)
	has("changes/s achieved seconds in0 packets fast-pathed fenced delivered linuxfp CPU errors")
	has("10 10 2.0 1000 90.0% 8.0% 1000 5% 0")
	has("1000 312 2.0 500 0.0% 100.0% 498 75% 2")
	// The churn has no row among the times.
	if i := strings.Index(out, "Unrelated churn"); i < 0 || strings.Contains(out[:i], ChurnCommand) {
		t.Errorf("churn missing or among the times:\n%s", out)
	}

	j, err := json.Marshal(results[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"command":"unrelated churn"`, `"churn":[{"rate":10,"achieved_rate":10,"changes":20,"seconds":2`,
		`"forwarded":900,"passed":100,"fenced":80,"delivered":1000,"linuxfp_cpu_s":0.1}`, `"errors":2`} {
		if !strings.Contains(string(j), f) {
			t.Errorf("JSON has no %s: %s", f, j)
		}
	}
}

// The stream of "iptables-restore 10000 rules" goes to the last rule's address.
func TestBlacklistLast(t *testing.T) {
	lines := strings.Split(strings.TrimSpace(harness.DropRules(10000, blacklistAddr)), "\n")
	if n := len(lines) - 3; n != 10000 {
		t.Errorf("%d rules, want 10000", n)
	}
	if last := lines[len(lines)-2]; last != "-A FORWARD -d "+blacklistLast+"/32 -j DROP" {
		t.Errorf("the last rule is %q, want one for %s", last, blacklistLast)
	}
}
