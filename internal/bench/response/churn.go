package response

// Unrelated churn: a stream whose path no change touches, while N configuration changes per second
// are made elsewhere (routes to other prefixes, elements of a set no rule uses, ACCEPT rules for
// other addresses). linuxfp's fence hands a whole family to Linux from a change's return until it
// has applied it, so the stream goes to Linux part of the time although nothing it depends on
// changed: the share of its packets still fast-pathed, and linuxfp's CPU, show what that costs.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
)

// ChurnCommand is the result's command name, and what --only selects it by.
const ChurnCommand = "unrelated churn"

// ChurnResult is one rate's window.
type ChurnResult struct {
	// Rate: the changes per second asked for; Achieved: made (forks of ip, ipset and iptables,
	// one command each, may not keep up); Changes: how many, over Seconds.
	Rate     int     `json:"rate"`
	Achieved float64 `json:"achieved_rate"`
	Changes  int     `json:"changes"`
	Seconds  float64 `json:"seconds"`
	// In0's packets over the window: forwarded by the fast path, passed to Linux (any reason),
	// of those passed as `fenced`; Delivered: the stream's packets the sink counted.
	Forwarded uint64 `json:"forwarded"`
	Passed    uint64 `json:"passed"`
	Fenced    uint64 `json:"fenced"`
	Delivered uint64 `json:"delivered"`
	// CPU: linuxfp's user+system time over the window, seconds (from /proc/PID/stat).
	CPU float64 `json:"linuxfp_cpu_s"`
	// Errors: commands that failed (counted, not made).
	Errors int `json:"errors,omitempty"`
}

// FastShare is the share of in0's packets the fast path forwarded.
func (c ChurnResult) FastShare() float64 { return share(c.Forwarded, c.Forwarded+c.Passed) }

// FencedShare is the share of in0's packets passed to Linux as `fenced`.
func (c ChurnResult) FencedShare() float64 { return share(c.Fenced, c.Forwarded+c.Passed) }

func share(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// churnDst is the stream's destination; the changes use 198.19.200-202.0/24.
const churnDst = "198.19.36.1"

// churnCommands returns worker w's i-th command. Each kind has its own worker so that one
// address's add and delete never race; a pass over 50 addresses adds them, the next deletes them.
func churnCommands(w, i int) []string {
	k := i % 50
	add := (i/50)%2 == 0
	switch w {
	case 0:
		return []string{"ip", "route", "replace", fmt.Sprintf("198.19.200.%d/32", k), "via", "198.18.1.2"}
	case 1:
		if add {
			return []string{"ipset", "-exist", "add", "lfpchurn", fmt.Sprintf("198.19.202.%d", k)}
		}
		return []string{"ipset", "-exist", "del", "lfpchurn", fmt.Sprintf("198.19.202.%d", k)}
	default:
		op := "-A"
		if !add {
			op = "-D"
		}
		return []string{"iptables", op, "FORWARD", "-d", fmt.Sprintf("198.19.201.%d", k), "-j", "ACCEPT"}
	}
}

// dutExec runs one command in the DUT as a single fork: from a thread inside its namespace,
// whose namespace the child inherits (`ip netns exec` would be a second one).
func (rc *responseRun) dutExec(args []string) error {
	return rc.tb.DUT.Do(func() error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// measureChurn streams to churnDst for each rate in rates while the changes are made for d.
func (rc *responseRun) measureChurn(ctx context.Context, rates []int, d time.Duration) ([]ChurnResult, error) {
	if err := rc.dutScript("ip route replace 198.19.36.0/24 via 198.18.1.2\nipset -exist create lfpchurn hash:ip"); err != nil {
		return nil, err
	}
	defer rc.dutScript("iptables -F FORWARD\nipset destroy lfpchurn")
	sk, err := harness.AttachSink(rc.tb.Sink, "eth0")
	if err != nil {
		return nil, err
	}
	defer sk.Close()
	st, err := rc.client.Status()
	if err != nil {
		return nil, err
	}
	pid := st.PID
	var out []ChurnResult
	for _, rate := range rates {
		if ctx.Err() != nil {
			break
		}
		if err := rc.settle(); err != nil {
			return out, err
		}
		stop := harness.StartStream(rc.tb.Gen, churnDst)
		// The stream runs through the fast path before the window opens.
		fwd, _ := rc.forwarded("in0", false)
		if _, ok := waitAbove(time.Now(), fwd, func() (uint64, bool) { return rc.forwarded("in0", false) }); !ok {
			stop()
			return out, fmt.Errorf("in0 never fast-pathed the stream to %s", churnDst)
		}
		time.Sleep(20 * time.Millisecond)
		r := ChurnResult{Rate: rate}
		in0, err := rc.in0Counts()
		if err != nil {
			stop()
			return out, err
		}
		s0, err := sk.Read()
		if err != nil {
			stop()
			return out, err
		}
		cpu0, _ := harness.ProcessCPU(pid)
		start := time.Now()
		r.Changes, r.Errors = rc.churn(ctx, rate, d)
		el := time.Since(start)
		cpu1, _ := harness.ProcessCPU(pid)
		in1, err := rc.in0Counts()
		s1, serr := sk.Read()
		stop()
		if err != nil {
			return out, err
		}
		if serr != nil {
			return out, serr
		}
		r.Seconds = el.Seconds()
		r.Achieved = float64(r.Changes) / el.Seconds()
		r.Forwarded, r.Passed, r.Fenced = in1[0]-in0[0], in1[1]-in0[1], in1[2]-in0[2]
		r.Delivered = s1.Packets - s0.Packets
		r.CPU = (cpu1 - cpu0).Seconds()
		out = append(out, r)
		// Undo the window's rules and elements so that every rate starts from the same state.
		if err := rc.dutScript("iptables -F FORWARD\nipset flush lfpchurn"); err != nil {
			return out, err
		}
	}
	return out, nil
}

// churn makes rate changes per second for d, spread over one worker per kind of change, each
// paced to its share; a worker that falls behind runs its commands back to back. It returns the
// commands made and those that failed.
func (rc *responseRun) churn(ctx context.Context, rate int, d time.Duration) (int, int) {
	const workers = 3
	var mu sync.Mutex
	made, failed := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		per := float64(rate) / workers
		if per <= 0 {
			continue
		}
		interval := time.Duration(float64(time.Second) / per)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				at := start.Add(time.Duration(i) * interval)
				if at.Sub(start) >= d {
					return
				}
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait)
				}
				if time.Since(start) >= d {
					return
				}
				err := rc.dutExec(churnCommands(w, i))
				mu.Lock()
				if err != nil {
					failed++
					if failed == 1 {
						fmt.Fprintln(os.Stderr, "churn:", err)
					}
				} else {
					made++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// The window is d even when the last command came earlier.
	if left := time.Until(start.Add(d)); left > 0 {
		time.Sleep(left)
	}
	return made, failed
}

// in0Counts is in0's packets forwarded, passed (any reason) and passed as `fenced`.
func (rc *responseRun) in0Counts() ([3]uint64, error) {
	st, err := rc.client.Status()
	if err != nil {
		return [3]uint64{}, err
	}
	for _, it := range st.Interfaces {
		if it.Name != "in0" {
			continue
		}
		var passed uint64
		for _, c := range it.Passed {
			passed += c.Packets
		}
		return [3]uint64{it.Forwarded.Packets + it.Bridged.Packets, passed, it.Passed["fenced"].Packets}, nil
	}
	return [3]uint64{}, fmt.Errorf("linuxfp's status has no in0")
}

// writeChurn writes the table of the unrelated churn windows, if any.
func writeChurn(w io.Writer, results []Result) {
	var rows []ChurnResult
	for _, r := range results {
		rows = append(rows, r.Churn...)
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nUnrelated churn: a stream routed through in0 (198.19.36.1) while changes it does not depend on are made")
	fmt.Fprintln(w, "(ip route replace of other /32s, ipset add/del in a set no rule uses, iptables -A/-D FORWARD ... -j ACCEPT")
	fmt.Fprintln(w, "for other addresses; one fork each). in0's packets: the share fast-pathed (forwarded / (forwarded +")
	fmt.Fprintln(w, "passed)) and the share passed as fenced; linuxfp's CPU over the window, % of one CPU")
	tw := harness.NewTable(w, "changes/s", "achieved", "seconds", "in0 packets", "fast-pathed", "fenced", "delivered", "linuxfp CPU", "errors")
	for _, c := range rows {
		cpu := 0.0
		if c.Seconds > 0 {
			cpu = 100 * c.CPU / c.Seconds
		}
		tw.Rowf("%d\t%.0f\t%.1f\t%d\t%.1f%%\t%.1f%%\t%d\t%.0f%%\t%d", c.Rate, c.Achieved, c.Seconds,
			c.Forwarded+c.Passed, 100*c.FastShare(), 100*c.FencedShare(), c.Delivered, cpu, c.Errors)
	}
	tw.Flush()
}
