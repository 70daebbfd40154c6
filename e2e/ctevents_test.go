package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// ctEventLog records a namespace's UDP conntrack entries as they are created and destroyed
// (conntrack -E), and the test's own deletions, so that a flow that changed its entry can be
// told why: a test that reports one quotes the flow's lines.
type ctEventLog struct {
	mu    sync.Mutex
	lines []string
	t0    time.Time
}

// listenCTEvents starts the log of ns's UDP conntrack events; it stops when the test ends.
func listenCTEvents(t *testing.T, ns *nsutil.NS) *ctEventLog {
	t.Helper()
	l := &ctEventLog{t0: time.Now()}
	var c *conntrack.Conn
	if err := ns.Do(func() (err error) { c, err = conntrack.Dial(nil); return }); err != nil {
		t.Fatal(err)
	}
	ev := make(chan conntrack.Event, 1024)
	if _, err := c.Listen(ev, 1, []netfilter.NetlinkGroup{netfilter.GroupCTNew, netfilter.GroupCTDestroy}); err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		for e := range ev {
			if e.Flow != nil && e.Flow.TupleOrig.Proto.Protocol == unix.IPPROTO_UDP {
				l.add(e.Type.String(), *e.Flow)
			}
		}
	}()
	return l
}

// add records what happened to the entry f.
func (l *ctEventLog) add(what string, f conntrack.Flow) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o, r := f.TupleOrig, f.TupleReply
	l.lines = append(l.lines, fmt.Sprintf("%7.3fs %s: %s:%d -> %s:%d, reply from %s:%d to :%d", time.Since(l.t0).Seconds(), what,
		o.IP.SourceAddress, o.Proto.SourcePort, o.IP.DestinationAddress, o.Proto.DestinationPort,
		r.IP.SourceAddress, r.Proto.SourcePort, r.Proto.DestinationPort))
}

// of is the lines of the entries whose original source is src.
func (l *ctEventLog) of(src string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.lines {
		if strings.Contains(s, ": "+src+" -> ") {
			b.WriteString("\n\t" + s)
		}
	}
	return b.String()
}
