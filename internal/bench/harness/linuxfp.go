package harness

import (
	"fmt"
	"slices"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// LinuxfpSettle is how long linuxfp must apply no change before a measurement: ten times its
// longest coalescing delay for a burst of events (20 ms).
const LinuxfpSettle = 200 * time.Millisecond

// StartLinuxfp starts `linuxfp run` with args in ns, waits until it has decided about every one
// of ifnames (a program, or notes saying why not), then until it settles (Settle, for up to
// settle). Whether linuxfp accelerates an interface is what a benchmark measures and reports,
// not a condition to start.
func StartLinuxfp(ns *nsutil.NS, bin string, ifnames []string, settle time.Duration, args ...string) (*testbed.Linuxfp, error) {
	l, err := testbed.StartLinuxfpIn(ns, bin, func(st *status.Status) bool {
		decided := 0
		for _, it := range st.Interfaces {
			if slices.Contains(ifnames, it.Name) && (it.Program != nil || len(it.Notes) > 0) {
				decided++
			}
		}
		return decided == len(ifnames)
	}, args...)
	if err != nil {
		return nil, err
	}
	if err := settled(l, settle); err != nil {
		l.Stop()
		return nil, fmt.Errorf("linuxfp did not settle after start: %w; log:\n%s", err, l.Log.String())
	}
	return l, nil
}

// Settle waits, for up to timeout, until linuxfp has applied no change, and is busy applying
// none, for LinuxfpSettle.
func Settle(l *testbed.Linuxfp, timeout time.Duration) error {
	if err := settled(l, timeout); err != nil {
		return fmt.Errorf("linuxfp did not settle: %w; log:\n%s", err, l.Log.String())
	}
	return nil
}

func settled(l *testbed.Linuxfp, timeout time.Duration) error {
	var last uint64
	var since time.Time
	return l.WaitFor(timeout, func(st *status.Status) bool {
		if since.IsZero() || st.Applies != last || st.Busy {
			last, since = st.Applies, time.Now()
			return false
		}
		return time.Since(since) >= LinuxfpSettle
	})
}
