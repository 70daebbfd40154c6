package controller

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/status"
)

// The packet monitor's side of the status API (GET /v1/monitor, `linuxfp monitor`): the data
// plane reports the packets it hands to Linux or drops while at least one monitor is
// connected (dataplane.SetMonitor), and the controller streams each monitor the ones it asked
// for, as JSON lines. The data plane reports the kinds some monitor asked for (pass, drop) with
// the largest snap length asked; interfaces and reasons are filtered here, before the socket.

const (
	// maxMonitors: monitors connected at once, so that they can never hold all of the API's
	// connections (apiMaxConns).
	maxMonitors = 8
	// monitorQueue: events waiting for one monitor; beyond it, its events are counted lost
	// rather than held up for the others or for the data plane.
	monitorQueue = 4096
	// monitorWriteTimeout: a monitor that reads nothing for this long is disconnected.
	monitorWriteTimeout = 10 * time.Second
)

// monitorHub fans the data plane's events out to the connected monitors.
type monitorHub struct {
	dp   *dataplane.Dataplane
	log  *slog.Logger
	name func(ifindex int) string

	mu      sync.Mutex
	clients map[*monitorClient]bool
	rd      *dataplane.MonitorReader
	reading chan struct{} // closed when the reader's goroutine has returned
	closed  bool
}

type monitorClient struct {
	q       status.MonitorQuery
	ifaces  map[string]bool // nil: all
	reasons map[string]bool // nil: all
	ch      chan *status.MonitorEvent
	lost    atomic.Uint64
}

func newMonitorHub(dp *dataplane.Dataplane, log *slog.Logger, name func(int) string) *monitorHub {
	return &monitorHub{dp: dp, log: log, name: name, clients: map[*monitorClient]bool{}}
}

// errTooManyMonitors: maxMonitors are connected.
var errTooManyMonitors = errors.New("linuxfp serves at most " + strconv.Itoa(maxMonitors) + " monitors at once; try again")

// add connects a monitor: the first one opens the reader before the data plane starts reporting.
func (h *monitorHub) add(c *monitorClient) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("linuxfp is stopping")
	}
	if len(h.clients) >= maxMonitors {
		return errTooManyMonitors
	}
	if h.rd == nil {
		rd, err := h.dp.OpenMonitor()
		if err != nil {
			return err
		}
		h.rd, h.reading = rd, make(chan struct{})
		go h.read(rd, h.reading)
	}
	h.clients[c] = true
	if err := h.applyLocked(); err != nil {
		delete(h.clients, c)
		h.applyLocked()
		return err
	}
	h.log.Info("monitor connected", "monitors", len(h.clients), "type", monitorTypes(c.q), "interfaces", c.q.Interfaces, "reasons", c.q.Reasons)
	return nil
}

// remove disconnects a monitor: after the last one the data plane stops reporting, then the
// reader closes.
func (h *monitorHub) remove(c *monitorClient) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.clients[c] {
		return
	}
	delete(h.clients, c)
	if err := h.applyLocked(); err != nil {
		h.log.Warn("monitor settings", "err", err)
	}
	h.log.Info("monitor disconnected", "monitors", len(h.clients))
}

// applyLocked tells the data plane what the connected monitors ask for, and closes the reader
// when none is left. Called with h.mu held.
func (h *monitorHub) applyLocked() error {
	var pass, drop bool
	snap := 0
	for c := range h.clients {
		pass, drop = pass || c.q.Pass, drop || c.q.Drop
		snap = max(snap, c.q.SnapLen)
	}
	err := h.dp.SetMonitor(pass, drop, snap)
	if len(h.clients) == 0 && h.rd != nil {
		h.rd.Close()
		<-h.reading
		h.rd = nil
	}
	return err
}

// close disconnects every monitor's feed and stops the reports (linuxfp is stopping).
func (h *monitorHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.clients {
		delete(h.clients, c)
		close(c.ch)
	}
	h.applyLocked()
}

// read hands each event to the monitors that asked for it, never waiting for one.
func (h *monitorHub) read(rd *dataplane.MonitorReader, done chan struct{}) {
	defer close(done)
	for {
		ev, lost, err := rd.Read()
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				h.log.Error("monitor events", "err", err)
			}
			return
		}
		h.mu.Lock()
		if lost > 0 {
			for c := range h.clients {
				c.lost.Add(lost)
			}
			h.mu.Unlock()
			continue
		}
		var out *status.MonitorEvent
		for c := range h.clients {
			if !c.wants(ev) {
				continue
			}
			if out == nil {
				out = h.event(ev)
			}
			if c.ifaces != nil && !c.ifaces[out.Interface] {
				continue
			}
			select {
			case c.ch <- out:
			default:
				c.lost.Add(1)
			}
		}
		h.mu.Unlock()
	}
}

// wants: the event is of a kind and reason c asked for (its interface is checked by name).
func (c *monitorClient) wants(ev *dataplane.MonitorEvent) bool {
	if ev.Dropped && !c.q.Drop || !ev.Dropped && !c.q.Pass {
		return false
	}
	return c.reasons == nil || c.reasons[ev.Reason.String()]
}

func (h *monitorHub) event(ev *dataplane.MonitorEvent) *status.MonitorEvent {
	out := &status.MonitorEvent{Time: ev.Time, Ifindex: ev.Ifindex, Interface: h.name(ev.Ifindex),
		Type: "pass", Reason: ev.Reason.String(), Hook: "xdp", Len: ev.Len, Data: ev.Data}
	if ev.Dropped {
		out.Type = "drop"
	}
	if ev.TC {
		out.Hook = "tc"
	}
	return out
}

func monitorTypes(q status.MonitorQuery) string {
	switch {
	case q.Pass && q.Drop:
		return "drop,pass"
	case q.Drop:
		return "drop"
	}
	return "pass"
}

// serveMonitor streams the events a monitor asks for until it disconnects or linuxfp stops.
func (c *Controller) serveMonitor(w http.ResponseWriter, r *http.Request) {
	q, err := status.ParseMonitorQuery(r.URL.Query())
	if err == nil {
		err = checkReasons(q.Reasons)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mc := &monitorClient{q: q, ch: make(chan *status.MonitorEvent, monitorQueue)}
	if len(q.Interfaces) > 0 {
		mc.ifaces = map[string]bool{}
		for _, n := range q.Interfaces {
			mc.ifaces[n] = true
		}
	}
	if len(q.Reasons) > 0 {
		mc.reasons = map[string]bool{}
		for _, n := range q.Reasons {
			mc.reasons[n] = true
		}
	}
	// The API's read and write timeouts bound requests; this one lasts as long as the monitor
	// runs (a monitor that stops reading is cut off by monitorWriteTimeout instead).
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := c.mon.add(mc); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, errTooManyMonitors) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer c.mon.remove(mc)

	w.Header().Set("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	flush := func() error {
		rc.SetWriteDeadline(time.Now().Add(monitorWriteTimeout))
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	if flush() != nil {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-mc.ch:
			if !ok {
				return
			}
			enc.Encode(ev)
			// What else is waiting goes out in the same write.
			for n := len(mc.ch); n > 0; n-- {
				if ev, ok = <-mc.ch; !ok {
					break
				}
				enc.Encode(ev)
			}
		case <-tick.C:
		}
		if n := mc.lost.Swap(0); n > 0 {
			enc.Encode(&status.MonitorEvent{Lost: n})
		}
		if bw.Buffered() > 0 && flush() != nil {
			return
		}
	}
}

// checkReasons: every name is a reason linuxfp counts (status shows them).
func checkReasons(names []string) error {
	for _, n := range names {
		if _, ok := dataplane.ReasonByName(n); !ok {
			return fmt.Errorf("reason %q: not one linuxfp counts (%s)", n, reasonList())
		}
	}
	return nil
}

// reasonList: the reasons a monitor reports packets for.
func reasonList() string {
	var out []string
	for r := range dataplane.Reason(dataplane.NumReasons) {
		if r == dataplane.FilterDropped || !r.FastPathed() && r != dataplane.ToTC {
			out = append(out, r.String())
		}
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}
