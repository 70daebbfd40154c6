package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/perf"
	"golang.org/x/sys/unix"
)

// The packet monitor (bpf/lib/monitor.h): while SetMonitor asks for them, the programs report
// the packets they hand to Linux or drop, with their first bytes, through a perf event array
// that a MonitorReader reads.

// MonitorEvent is one reported packet.
type MonitorEvent struct {
	Time    time.Time
	Ifindex int
	Reason  Reason
	Dropped bool // dropped in the fast path; else handed to Linux
	TC      bool // reported by a tc program (else XDP)
	Len     int  // the packet's length
	Data    []byte
}

// MonitorSnapLenMax is LFP_MON_SNAPLEN_MAX: the most bytes of a packet an event carries.
const MonitorSnapLenMax = 16384

// monitorEventSize is sizeof(struct lfp_monitor_event) (bpf/include/linuxfp_types.h): time_ns
// u64, ifindex u32, len u32, caplen u32, reason u16, flags u8, tc u8. bpf2go cannot generate it
// (no map or global has the type, so the object's BTF lacks it); TestMonitorEvents reads one.
const monitorEventSize = 24

// SetMonitor says which packets the programs report (none: both false) and how many of their
// bytes. It reloads nothing: the programs read it where a packet goes to Linux or is dropped.
func (d *Dataplane) SetMonitor(pass, drop bool, snapLen int) error {
	var m linuxfpLfpMonitor
	if pass {
		m.Flags |= linuxfpLfpMonitorFlagsLFP_MON_PASS
	}
	if drop {
		m.Flags |= linuxfpLfpMonitorFlagsLFP_MON_DROP
	}
	m.Snaplen = uint32(min(max(snapLen, 0), MonitorSnapLenMax))
	if err := d.maps.LfpMonitorMap.Put(uint32(0), m); err != nil {
		return fmt.Errorf("monitor settings: %w", err)
	}
	return nil
}

// MonitorReader reads the reported packets. Events arrive within monitorLatency of being
// reported, in order per CPU (not across CPUs).
type MonitorReader struct {
	rd *perf.Reader
	// bootToWall turns CLOCK_BOOTTIME (bpf_ktime_get_boot_ns) into wall-clock time.
	bootToWall time.Duration
	deadline   bool
}

const (
	// monitorBuffer: each CPU's buffer. 256 KiB holds about 1,500 events of 128-byte packets.
	monitorBuffer = 256 << 10
	// monitorLatency: the reader is woken when a CPU's buffer is a quarter full, and reads
	// whatever there is at least this often; so a packet rate that fills the buffers costs a
	// wake-up per few hundred events, not one per event.
	monitorLatency = 100 * time.Millisecond
)

// OpenMonitor starts reading the reported packets (SetMonitor says which). Close it after
// SetMonitor has turned reporting off.
func (d *Dataplane) OpenMonitor() (*MonitorReader, error) {
	rd, err := perf.NewReaderWithOptions(d.maps.LfpMonitorEvents, monitorBuffer, perf.ReaderOptions{Watermark: monitorBuffer / 4})
	if err != nil {
		return nil, fmt.Errorf("monitor events: %w", err)
	}
	var boot, wall unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		rd.Close()
		return nil, fmt.Errorf("CLOCK_BOOTTIME: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_REALTIME, &wall); err != nil {
		rd.Close()
		return nil, fmt.Errorf("CLOCK_REALTIME: %w", err)
	}
	return &MonitorReader{rd: rd, bootToWall: time.Duration(wall.Nano() - boot.Nano())}, nil
}

// Read returns the next event, or the number of events lost (the buffers were full) since the
// last call that returned some. It returns os.ErrClosed once the reader is closed.
func (m *MonitorReader) Read() (*MonitorEvent, uint64, error) {
	for {
		if !m.deadline {
			m.rd.SetDeadline(time.Now().Add(monitorLatency))
			m.deadline = true
		}
		rec, err := m.rd.Read()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			m.deadline = false
			continue
		case errors.Is(err, perf.ErrClosed):
			return nil, 0, os.ErrClosed
		case err != nil:
			return nil, 0, err
		}
		if rec.LostSamples > 0 {
			return nil, rec.LostSamples, nil
		}
		if ev, ok := m.decode(rec.RawSample); ok {
			return ev, 0, nil
		}
	}
}

// decode reads struct lfp_monitor_event and the bytes after it (the sample may end in up to 7
// bytes of padding).
func (m *MonitorReader) decode(b []byte) (*MonitorEvent, bool) {
	if len(b) < monitorEventSize {
		return nil, false
	}
	ne := binary.NativeEndian
	caplen := int(ne.Uint32(b[16:]))
	if caplen > len(b)-monitorEventSize {
		return nil, false
	}
	boot := time.Duration(ne.Uint64(b[0:]))
	return &MonitorEvent{
		Time:    time.Unix(0, int64(boot+m.bootToWall)),
		Ifindex: int(ne.Uint32(b[8:])),
		Len:     int(ne.Uint32(b[12:])),
		Reason:  Reason(ne.Uint16(b[20:])),
		Dropped: b[22]&byte(linuxfpLfpMonitorFlagsLFP_MON_DROP) != 0,
		TC:      b[23] != 0,
		Data:    append([]byte(nil), b[monitorEventSize:monitorEventSize+caplen]...),
	}, true
}

// Close stops reading; a Read in progress returns os.ErrClosed.
func (m *MonitorReader) Close() error { return m.rd.Close() }
