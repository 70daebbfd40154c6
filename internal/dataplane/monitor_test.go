package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
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

// BenchmarkMonitor times the XDP program (BPF_PROG_TEST_RUN) on a forwarded
// packet and on a TTL 1 packet (handed to Linux), with no monitor and with one asking for every
// packet (the events are read between runs, so each output finds room): the forwarding path
// must cost the same either way.
func BenchmarkMonitor(b *testing.B) {
	env := newTestEnv(b)
	m, err := env.dp.OpenMonitor()
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prog := env.prog(b, true, true)
	// One run a call: the test run repeats on the same buffer, which a forward rewrites (MACs,
	// TTL), so a second run would see another packet. The kernel times the run alone.
	good := v4("198.18.0.2", "198.19.0.9")
	ttl1 := good
	ttl1.TTL = 1
	const repeat = 1
	for _, c := range []struct {
		name string
		pkt  []byte
	}{{"forwarded", good.Bytes()}, {"ttl1", ttl1.Bytes()}} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/monitor=%v", c.name, on), func(b *testing.B) {
				if err := env.dp.SetMonitor(on, on, 128); err != nil {
					b.Fatal(err)
				}
				defer env.dp.SetMonitor(false, false, 0)
				md := xdpMD{DataEnd: uint32(len(c.pkt)), IngressIfindex: uint32(env.in)}
				var spent time.Duration
				for b.Loop() {
					err := env.ns.Do(func() error {
						d, err := testRunDuration(prog, c.pkt, md, repeat)
						spent += d * repeat
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					drainQuiet(m)
				}
				b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*repeat), "ns/pkt")
			})
		}
	}
}

// testRunDuration runs prog repeat times on pkt with BPF_PROG_TEST_RUN and returns the
// kernel's time per run: it leaves out the time the test run yielded the CPU, which a busy
// machine would add to a wall-clock measurement (cilium/ebpf's Benchmark returns it too, but
// takes no context, so the program would not know its ingress interface).
func testRunDuration(prog *ebpf.Program, pkt []byte, md xdpMD, repeat uint32) (time.Duration, error) {
	ctx := unsafe.Slice((*byte)(unsafe.Pointer(&md)), unsafe.Sizeof(md))
	var attr struct {
		progFD, retval, dataSizeIn, dataSizeOut uint32
		dataIn, dataOut                         uint64
		repeat, duration                        uint32
		ctxSizeIn, ctxSizeOut                   uint32
		ctxIn, ctxOut                           uint64
		flags, cpu, batchSize                   uint32
		_                                       uint32
	}
	attr.progFD = uint32(prog.FD())
	attr.dataSizeIn, attr.dataIn = uint32(len(pkt)), uint64(uintptr(unsafe.Pointer(&pkt[0])))
	attr.repeat = repeat
	attr.ctxSizeIn, attr.ctxIn = uint32(len(ctx)), uint64(uintptr(unsafe.Pointer(&ctx[0])))
	errno := unix.EINTR
	for errno == unix.EINTR { // a signal (the Go runtime's preemption): the run starts again
		_, _, errno = unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	}
	runtime.KeepAlive(pkt)
	runtime.KeepAlive(&md)
	if errno != 0 {
		return 0, errno
	}
	return time.Duration(attr.duration), nil
}

// drainQuiet discards the events reported so far.
func drainQuiet(m *MonitorReader) {
	m.rd.SetDeadline(time.Now())
	for {
		if _, err := m.rd.Read(); err != nil {
			return
		}
	}
}
