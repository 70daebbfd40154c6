package dataplane

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The bridge module (bpf/lib/bridge.h, fdb.h): switches frames between the ports of a bridge
// by a mirror of its forwarding database, and refreshes in Linux the addresses it keeps using.

// BridgeData is what the bridge module reads.
type BridgeData struct {
	// L2 are the bridges and bridge ports, FDB the bridges' forwarding databases (VLAN 0).
	L2  []L2Dev
	FDB []FDBEntry
	// FDBMoves are the counts of the bridge FDB's moves (FDBMoves) read before FDB was: each
	// entry is used only while its bucket's count stays as read (nil: all 0).
	FDBMoves []uint64
}

// L2Flags are struct lfp_l2_dev's flags (enum lfp_l2_flags).
type L2Flags uint32

const (
	L2Bridge     = L2Flags(linuxfpLfpL2FlagsLFP_L2BRIDGE)     // a bridge device
	L2Forwarding = L2Flags(linuxfpLfpL2FlagsLFP_L2FORWARDING) // port in STP forwarding state
	L2InOK       = L2Flags(linuxfpLfpL2FlagsLFP_L2IN_OK)      // port: frames received may be fast-pathed
	L2OutOK      = L2Flags(linuxfpLfpL2FlagsLFP_L2OUT_OK)     // bridge: routed packets may go through its FDB
	L2Learning   = L2Flags(linuxfpLfpL2FlagsLFP_L2LEARNING)   // port learns: refresh its addresses
	L2Isolated   = L2Flags(linuxfpLfpL2FlagsLFP_L2ISOLATED)   // port isolated
	L2NF4        = L2Flags(linuxfpLfpL2FlagsLFP_L2NF4)        // br_netfilter validates and trims bridged IPv4
	L2NF6        = L2Flags(linuxfpLfpL2FlagsLFP_L2NF6)        // br_netfilter validates and trims bridged IPv6
	L2IP4Off     = L2Flags(linuxfpLfpL2FlagsLFP_L2IP4OFF)     // bridged IPv4 goes to Linux
	L2IP6Off     = L2Flags(linuxfpLfpL2FlagsLFP_L2IP6OFF)     // bridged IPv6 goes to Linux
)

// L2Dev is a bridge or a bridge port.
type L2Dev struct {
	Ifindex int
	Bridge  int // the bridge's ifindex (its own for a bridge)
	Flags   L2Flags
	MTU     int
	BrMAC   net.HardwareAddr // the bridge's MAC (ports)
}

// FDBEntry is one forwarding-database entry of a bridge.
type FDBEntry struct {
	Bridge int
	MAC    net.HardwareAddr
	Port   int  // ifindex of the port (or of the bridge, for some local entries)
	Local  bool // NUD_PERMANENT: one of the bridge's own addresses
}

// bridgeMaps mirror what the bridge module's maps hold.
type bridgeMaps struct {
	fdb map[linuxfpLfpFdbKey]linuxfpLfpFdbVal
	l2  map[uint32]linuxfpLfpL2Dev
	// slots: what lfp_fdb_slots holds, by slot; words: lfp_fdb_slots mapped (mapSlots), until
	// unmapSlots; it has 1<<slotBits slots.
	slots    map[uint32]fdbSlot
	words    []uint64
	slotBits int
	unmap    func()
}

// fdbSlot is one slot's entry of the FDB's direct-mapped copy (struct lfp_fdb_slot, bpf/lib/fdb.h).
type fdbSlot struct {
	key linuxfpLfpFdbKey
	val linuxfpLfpFdbVal
}

func newBridgeMaps() bridgeMaps {
	return bridgeMaps{fdb: map[linuxfpLfpFdbKey]linuxfpLfpFdbVal{}, l2: map[uint32]linuxfpLfpL2Dev{},
		slots: map[uint32]fdbSlot{}}
}

// The FDB goes in before the ports and bridges that make the data plane use it, and both
// before lfp_config's count of bridges; an entry removed goes first (syncMap deletes before it
// adds).
func (b *bridgeMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	l2 := map[uint32]linuxfpLfpL2Dev{}
	for _, dv := range data.L2 {
		v := linuxfpLfpL2Dev{Bridge: uint32(dv.Bridge), Flags: linuxfpLfpL2Flags(dv.Flags), Mtu: uint32(dv.MTU)}
		copy(v.BrMac[:], dv.BrMAC)
		l2[uint32(dv.Ifindex)] = v
		if dv.Flags&L2Bridge != 0 {
			cfg.Bridges++
		}
	}
	fdb := map[linuxfpLfpFdbKey]linuxfpLfpFdbVal{}
	for _, e := range data.FDB {
		k := linuxfpLfpFdbKey{Bridge: uint32(e.Bridge)}
		copy(k.Mac[:], e.MAC)
		b := fdbBucket(k)
		v := linuxfpLfpFdbVal{Port: uint32(e.Port), Bucket: uint16(b)}
		if b < len(data.FDBMoves) {
			v.Moved = data.FDBMoves[b]
		}
		if e.Local {
			v.Flags = linuxfpLfpFdbFlagsLFP_FDB_LOCAL
		}
		// seen is the data plane's: an entry that did not change is not rewritten (syncMap
		// compares with what it wrote), so its refresh timestamp survives. An entry whose
		// bucket counted a move since it was written is (with the count it was read with).
		fdb[k] = v
	}
	return []func() error{
		// The hash map first: a frame that finds a slot being written looks there.
		func() error { return syncMap(d.maps.LfpFdb, b.fdb, fdb) },
		func() error { return b.syncSlots(fdb) },
		func() error { return syncSplitMap(d.maps.LfpL2, d.maps.LfpL2Hi, b.l2, l2) },
	}, nil
}

// fdbMoveBuckets is LFP_FDB_MOVE_BUCKETS (bpf/include/fdb_map.h).
const fdbMoveBuckets = 4096

// fdbBucket is fdb_bucket() of bpf/include/fdb_map.h: the bucket of moves k's entry is in. The
// data plane reads it from the entry (lfp_fdb_val.bucket, and its slot's), the watcher computes
// it: the two must agree, or a move would leave the entry in use (e2e
// TestBridgeMoveFollowedAtOnce).
func fdbBucket(k linuxfpLfpFdbKey) int {
	m := k.Mac
	h := k.Bridge * 0x9e3779b1
	h ^= uint32(m[0]) | uint32(m[1])<<8 | uint32(m[2])<<16 | uint32(m[3])<<24
	h *= 0x85ebca6b
	h ^= uint32(m[4]) | uint32(m[5])<<8
	h *= 0xc2b2ae35
	h ^= h >> 16
	return int(h & (fdbMoveBuckets - 1))
}

// fdbSlotOf is fdb_slot_of() of bpf/lib/fdb.h: the slot of lfp_fdb_slots (of 1<<bits) k's entry
// is written to, where the data plane looks for it.
func fdbSlotOf(k linuxfpLfpFdbKey, bits int) uint32 {
	m := k.Mac
	x := (uint32(m[2]) | uint32(m[3])<<8 | uint32(m[4])<<16 | uint32(m[5])<<24) ^ k.Bridge
	return x * 0x9e3779b1 >> (32 - bits)
}

// fdbSlotWords is struct lfp_fdb_slot's size in 8-byte words: mac, bridge, port, moved, seen.
const fdbSlotWords = 5

// fdbMovedMask is LFP_FDB_MOVED_MASK: a slot keeps a count's low 48 bits.
const fdbMovedMask = 1<<48 - 1

// mapSlots maps lfp_fdb_slots (BPF_F_MMAPABLE) for writing: a slot is rewritten in place while
// frames read it, one atomic 8-byte store per word, each with the slot's new generation (struct
// lfp_fdb_slot). An update through the bpf() syscall copies the value with memcpy, whose
// stores may be of any width.
func (b *bridgeMaps) mapSlots(m *ebpf.Map) error {
	if m.ValueSize() != fdbSlotWords*8 || m.MaxEntries()&(m.MaxEntries()-1) != 0 {
		return fmt.Errorf("lfp_fdb_slots: %d entries of %d bytes, want a power of 2 of %d", m.MaxEntries(), m.ValueSize(), fdbSlotWords*8)
	}
	n := int(m.MaxEntries()) * fdbSlotWords * 8
	mem, err := unix.Mmap(m.FD(), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map lfp_fdb_slots: %w", err)
	}
	b.words = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), n/8)
	b.slotBits = bits.Len32(m.MaxEntries()) - 1
	b.unmap = func() { unix.Munmap(mem) }
	return nil
}

func (b *bridgeMaps) unmapSlots() {
	if b.unmap != nil {
		b.unmap()
	}
	b.words, b.unmap, b.slots = nil, nil, map[uint32]fdbSlot{}
}

// syncSlots brings lfp_fdb_slots to the FDB fdb (the hash map's new contents): each entry in
// the slot its hash names, where two entries name one slot the one already there, else the lower
// key (the other is found in the hash map). A slot is written only when its entry changes: the
// new generation makes the entry's next frame a refresh (fdb_refresh_due), as a new hash map
// entry's seen of 0 does.
func (b *bridgeMaps) syncSlots(fdb map[linuxfpLfpFdbKey]linuxfpLfpFdbVal) error {
	if b.words == nil {
		return errors.New("lfp_fdb_slots: not mapped (data plane closed)")
	}
	want := make(map[uint32]fdbSlot, len(fdb))
	// before: slot i goes to x rather than y.
	before := func(i uint32, x, y linuxfpLfpFdbKey) bool {
		if cur, ok := b.slots[i]; ok && (cur.key == x || cur.key == y) {
			return cur.key == x
		}
		return fdbKeyCompare(x, y) < 0
	}
	for k, v := range fdb {
		i := fdbSlotOf(k, b.slotBits)
		if o, ok := want[i]; ok && before(i, o.key, k) {
			continue
		}
		want[i] = fdbSlot{key: k, val: v}
	}
	for i := range b.slots {
		if _, ok := want[i]; !ok {
			b.writeSlot(i, nil)
			delete(b.slots, i)
		}
	}
	for i, s := range want {
		if cur, ok := b.slots[i]; ok && cur == s {
			continue
		}
		b.writeSlot(i, &s)
		b.slots[i] = s
	}
	return nil
}

// writeSlot writes slot i's entry (nil: none) with the slot's next generation.
func (b *bridgeMaps) writeSlot(i uint32, s *fdbSlot) {
	w := b.words[i*fdbSlotWords : (i+1)*fdbSlotWords]
	gen := uint64(uint16(atomic.LoadUint64(&w[0]) + 1))
	var mac, bridge, port, moved uint64
	if s != nil {
		for j, c := range s.key.Mac {
			mac |= uint64(c) << (8 * j)
		}
		bridge = uint64(s.key.Bridge)<<32 | uint64(s.val.Flags)<<16
		port = uint64(s.val.Port)<<32 | uint64(s.val.Bucket)<<16
		moved = (s.val.Moved & fdbMovedMask) << 16
	}
	atomic.StoreUint64(&w[0], mac<<16|gen)
	atomic.StoreUint64(&w[1], bridge|gen)
	atomic.StoreUint64(&w[2], port|gen)
	atomic.StoreUint64(&w[3], moved|gen)
}

// fdbKeyCompare orders FDB keys by bridge, then MAC.
func fdbKeyCompare(a, b linuxfpLfpFdbKey) int {
	if c := cmp.Compare(a.Bridge, b.Bridge); c != 0 {
		return c
	}
	return bytes.Compare(a.Mac[:], b.Mac[:])
}

// mapFDBMoves maps lfp_fdb_moves (BPF_F_MMAPABLE) read-only: the watcher adds to its counts
// atomically, and a copy through the bpf() syscall (memcpy) could read one half-written.
func mapFDBMoves(m *ebpf.Map) (counts []uint64, unmap func(), err error) {
	if m.MaxEntries() != fdbMoveBuckets || m.ValueSize() != 8 {
		return nil, nil, fmt.Errorf("lfp_fdb_moves: %d entries of %d bytes, want %d of 8", m.MaxEntries(), m.ValueSize(), fdbMoveBuckets)
	}
	b, err := unix.Mmap(m.FD(), 0, fdbMoveBuckets*8, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("map lfp_fdb_moves: %w", err)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), fdbMoveBuckets), func() { unix.Munmap(b) }, nil
}

// FDBMoves reads the bridge FDB watcher's counts of moves (bpf/include/fdb_map.h). Read before
// the FDB, they make the entries written from that read Linux's once their bridge changes them.
func (d *Dataplane) FDBMoves() ([]uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fdbMoves == nil {
		return nil, errors.New("data plane closed")
	}
	out := make([]uint64, len(d.fdbMoves))
	for i := range d.fdbMoves {
		out[i] = atomic.LoadUint64(&d.fdbMoves[i])
	}
	return out, nil
}

// FDBRefreshInterval is how often, at most, the data plane hands Linux a frame from one learned
// address so that its bridge refreshes the entry (see fdb_refresh_due in bpf/lib/fdb.h).
const FDBRefreshInterval = time.Second

// bridgeSettings: a bridge port's program runs the bridge module.
func bridgeSettings(k *settings, s Spec, companion bool) {
	k.Bridge = boolU32(s.Bridge)
	k.FdbRefreshJiffies = fdbRefreshJiffies()
}

// fdbRefreshJiffies is FDBRefreshInterval in jiffies, the data plane's clock for it
// (fdb_refresh_due), rounded up.
func fdbRefreshJiffies() uint64 {
	hz := uint64(kernelHZ())
	return (uint64(FDBRefreshInterval)*hz + uint64(time.Second) - 1) / uint64(time.Second)
}

// minHZ is the least CONFIG_HZ kernel/Kconfig.hz offers (x86_64 and arm64 take theirs from it).
const minHZ = 100

// kernelHZ is the kernel's CONFIG_HZ, the rate of jiffies, from its configuration
// (/boot/config-RELEASE, or /proc/config.gz with IKCONFIG_PROC). cilium/ebpf has the same reader,
// but only for a program's __kconfig variables, and it fails the load where neither file is
// there. Here that is not an error: without the configuration it is minHZ, the least HZ, so that
// the refresh comes at least as often as FDBRefreshInterval (more often costs frames to Linux,
// never an entry aged out).
func kernelHZ() int {
	if hz, ok := kernelConfigHZ(); ok {
		return hz
	}
	return minHZ
}

// kernelConfigHZ is CONFIG_HZ as the kernel's configuration says, if it is there to read.
var kernelConfigHZ = sync.OnceValues(func() (int, bool) {
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		if hz, err := configHZ("/boot/config-"+unix.ByteSliceToString(uts.Release[:]), false); err == nil {
			return hz, true
		}
	}
	if hz, err := configHZ("/proc/config.gz", true); err == nil {
		return hz, true
	}
	return 0, false
})

// configHZ reads CONFIG_HZ from a kernel configuration file.
func configHZ(path string, gz bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var r io.Reader = f
	if gz {
		z, err := gzip.NewReader(f)
		if err != nil {
			return 0, err
		}
		defer z.Close()
		r = z
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			if err != nil || hz <= 0 {
				return 0, fmt.Errorf("%s: CONFIG_HZ=%q", path, v)
			}
			return hz, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no CONFIG_HZ", path)
}
