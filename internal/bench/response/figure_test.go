package response

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/bench/plot/plottest"
)

func TestFigure(t *testing.T) {
	ms := func(v ...int) *harness.Distribution {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		dist := harness.DistributionOf(d)
		return &dist
	}
	results := Results{
		{Command: "ip route add", Samples: 3, EventToDP: *ms(1, 2, 3), ExitToFast: ms(2, 3, 40), LinuxExitToDelivered: ms(1, 1, 2)},
		{Command: "brctl addif", Samples: 3, EventToDP: *ms(5, 6, 700), ExitToFast: ms(6, 7, 800)},
		{Command: "iptables -A", After: &AfterReturn{Samples: 4}},
		{Command: ChurnCommand, Churn: []ChurnResult{
			{Rate: 10, Achieved: 10, Forwarded: 90, Passed: 10, Fenced: 5},
			{Rate: 100, Achieved: 95, Forwarded: 50, Passed: 50, Fenced: 40}}},
	}
	if got := results[0].ExitToFast.Samples; len(got) != 3 || got[2] != 40 {
		t.Fatalf("samples kept %v, want 2, 3, 40 ms", got)
	}
	f := results.Figure()
	if len(f.Panels) != 4 {
		t.Fatalf("%d panels, want event->data plane, exit->fast path, Linux alone, churn", len(f.Panels))
	}
	s := plottest.Draw(t, f)
	// Three panels of staircases, the churn's two series with 2 points each.
	s.Expect(t, map[string]int{"ip route add": 3, "brctl addif": 2, "iptables -A": 0,
		"fast-pathed": 1, "passed as fenced": 1}, 2*2+2, 0)
	if s.Lines != 2*(2+2+1+2) {
		t.Errorf("%d lines, want a staircase per command and panel and the churn's 2 series, each in a legend", s.Lines)
	}

	// A result written without the samples draws p50, p99 and max as bars.
	data, err := json.Marshal(results[:1])
	if err != nil {
		t.Fatal(err)
	}
	var old Results
	if err := json.Unmarshal(data, &old); err != nil {
		t.Fatal(err)
	}
	old[0].EventToDP.Samples, old[0].ExitToFast.Samples, old[0].LinuxExitToDelivered.Samples = nil, nil, nil
	s = plottest.Draw(t, old.Figure())
	s.Expect(t, map[string]int{"ip route add": 3, "p50": 3, "p99": 3, "max": 3}, 0, 3*(3+1))
}
