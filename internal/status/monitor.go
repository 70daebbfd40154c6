package status

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MonitorQuery selects the packets GET /v1/monitor streams: those the fast path hands to Linux
// (Pass) or drops (Drop), received on one of Interfaces (all: none given), for one of Reasons
// (all: none given), with their first SnapLen bytes. The controller filters: events nobody
// asked for never cross the socket, and a monitor of drops alone turns on the reports of drops
// alone in the data plane.
type MonitorQuery struct {
	Interfaces []string
	Reasons    []string
	Pass, Drop bool
	SnapLen    int
}

// Values is the query string of q.
func (q MonitorQuery) Values() url.Values {
	v := url.Values{}
	if len(q.Interfaces) > 0 {
		v.Set("interface", strings.Join(q.Interfaces, ","))
	}
	if len(q.Reasons) > 0 {
		v.Set("reason", strings.Join(q.Reasons, ","))
	}
	switch {
	case q.Pass && !q.Drop:
		v.Set("type", "pass")
	case q.Drop && !q.Pass:
		v.Set("type", "drop")
	}
	v.Set("snaplen", strconv.Itoa(q.SnapLen))
	return v
}

// ParseMonitorQuery reads a query string Values wrote (no type: both).
func ParseMonitorQuery(v url.Values) (MonitorQuery, error) {
	split := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
		return out
	}
	q := MonitorQuery{Interfaces: split(v.Get("interface")), Reasons: split(v.Get("reason")), SnapLen: 128}
	switch t := v.Get("type"); t {
	case "":
		q.Pass, q.Drop = true, true
	case "pass":
		q.Pass = true
	case "drop":
		q.Drop = true
	default:
		return q, fmt.Errorf("type %q: want drop or pass", t)
	}
	if s := v.Get("snaplen"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return q, fmt.Errorf("snaplen %q: want a number of bytes", s)
		}
		q.SnapLen = n
	}
	return q, nil
}

// MonitorEvent is one line of GET /v1/monitor: a packet the fast path handed to Linux (Type
// "pass") or dropped ("drop"), with its first bytes (Data, of Len); or, with Lost set alone,
// how many such packets were not reported (buffers full, or a client reading too slowly).
type MonitorEvent struct {
	Time      time.Time `json:"time,omitzero"`
	Interface string    `json:"interface,omitempty"`
	Ifindex   int       `json:"ifindex,omitempty"`
	Type      string    `json:"type,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Hook      string    `json:"hook,omitempty"` // xdp or tc
	Len       int       `json:"len,omitempty"`
	Data      []byte    `json:"data,omitempty"`
	Lost      uint64    `json:"lost,omitempty"`
}

// ErrMonitorEnded: linuxfp ended the stream (it stopped).
var ErrMonitorEnded = errors.New("linuxfp ended the monitor stream (stopped?)")

// Monitor streams the packets q selects to fn until ctx is done (nil), fn returns an error
// (that error), or linuxfp ends the stream (ErrMonitorEnded). more says that the next event has
// arrived already (fn may hold its output back until an event without). While it runs, the
// data plane reports them; once the last monitor is gone it stops.
func (c *Client) Monitor(ctx context.Context, q MonitorQuery, fn func(ev *MonitorEvent, more bool) error) error {
	resp, err := c.open(ctx, c.stream, "/v1/monitor?"+q.Values().Encode())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return ErrMonitorEnded
			}
			return fmt.Errorf("monitor stream: %w", err)
		}
		var ev MonitorEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("monitor stream: %w", err)
		}
		if err := fn(&ev, br.Buffered() > 0); err != nil {
			return err
		}
	}
}
