package dataplane

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"
)

// The monitor reports what goes to Linux, with the packet's first bytes, only while asked to
// and only the kinds asked for; forwarded packets are never reported, and no reported packet is
// changed.
func TestMonitorEvents(t *testing.T) {
	env := newTestEnv(t)
	m, err := env.dp.OpenMonitor()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	good := v4("198.18.0.2", "198.19.0.9")
	ttl1 := good
	ttl1.TTL = 1
	ttl1.Size = 200
	pkt := ttl1.Bytes()

	for _, hook := range []Hook{HookXDP, HookTC} {
		t.Run(string(hook), func(t *testing.T) {
			env.hook = hook
			prog := env.prog(t, true, true)
			run := func(p []byte, want Reason) {
				t.Helper()
				ret, out, reason := env.run(t, prog, p)
				if reason != want {
					t.Fatalf("reason %v, want %v", reason, want)
				}
				if want != Forwarded && (ret != xdpPass || !bytes.Equal(out, p)) {
					t.Fatalf("verdict %d, modified %v: not handed to Linux untouched", ret, !bytes.Equal(out, p))
				}
			}

			// Off: nothing reported.
			if err := env.dp.SetMonitor(false, false, 128); err != nil {
				t.Fatal(err)
			}
			run(pkt, PassTTL)
			if evs := drainMonitor(t, m); len(evs) != 0 {
				t.Fatalf("monitor off: %d events", len(evs))
			}

			// Drops only: a packet for Linux is not reported.
			if err := env.dp.SetMonitor(false, true, 128); err != nil {
				t.Fatal(err)
			}
			run(pkt, PassTTL)
			if evs := drainMonitor(t, m); len(evs) != 0 {
				t.Fatalf("drops only: %d events for a packet handed to Linux", len(evs))
			}

			// Packets for Linux: reported with the first 128 bytes; a forwarded one is not.
			if err := env.dp.SetMonitor(true, true, 128); err != nil {
				t.Fatal(err)
			}
			run(good.Bytes(), Forwarded)
			run(pkt, PassTTL)
			evs := drainMonitor(t, m)
			if len(evs) != 1 {
				t.Fatalf("%d events, want 1 (the TTL 1 packet): %+v", len(evs), evs)
			}
			ev := evs[0]
			if ev.Reason != PassTTL || ev.Dropped || ev.Ifindex != env.in || ev.Len != len(pkt) || ev.TC != (hook == HookTC) ||
				!bytes.Equal(ev.Data, pkt[:128]) || time.Since(ev.Time).Abs() > time.Minute {
				t.Fatalf("event %+v, want reason ttl_exceeded, ifindex %d, len %d and the first 128 bytes of the packet", ev, env.in, len(pkt))
			}

			// A snap length beyond the packet: all of it.
			if err := env.dp.SetMonitor(true, false, 4096); err != nil {
				t.Fatal(err)
			}
			run(pkt, PassTTL)
			if evs := drainMonitor(t, m); len(evs) != 1 || !bytes.Equal(evs[0].Data, pkt) {
				t.Fatalf("snap length 4096: %+v, want the whole packet", evs)
			}
		})
	}
	if err := env.dp.SetMonitor(false, false, 0); err != nil {
		t.Fatal(err)
	}
}

// drainMonitor returns the events reported so far (the programs ran before: they are in the
// buffers).
func drainMonitor(t *testing.T, m *MonitorReader) []*MonitorEvent {
	t.Helper()
	var out []*MonitorEvent
	m.rd.SetDeadline(time.Now())
	defer func() { m.deadline = false }()
	for {
		rec, err := m.rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.LostSamples > 0 {
			t.Fatalf("%d events lost", rec.LostSamples)
		}
		ev, ok := m.decode(rec.RawSample)
		if !ok {
			t.Fatalf("undecodable sample %x", rec.RawSample)
		}
		out = append(out, ev)
	}
}
