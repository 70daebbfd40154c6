package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Data is everything the programs read from maps: changing it never reloads a program.
type Data struct {
	// TxDevs are the ifindexes an XDP program may redirect a frame to.
	TxDevs []int
	// TCTx are the devices a TC program may redirect an skb to, and how.
	TCTx []TCTx
	// StaleNeighbours are the neighbour entries Linux reports STALE.
	StaleNeighbours []NeighKey
	// LocalHosts are addresses whose packets Linux rejects as local (martian) sources.
	LocalHosts []netip.Addr
	// LocalPrefixes are non-host prefixes routed as local, broadcast, anycast or multicast.
	LocalPrefixes []netip.Prefix
	// RouteMTU4 / RouteMTU6 are the smallest MTU metric of any IPv4 / IPv6 route (0: none).
	RouteMTU4, RouteMTU6 uint32
	// FwdUpdatePriority4: net.ipv4.ip_forward_update_priority (forwarded IPv4 gets the skb
	// priority of its TOS at tc).
	FwdUpdatePriority4 bool
	// L2 are the bridges and bridge ports, FDB the bridges' forwarding databases (VLAN 0).
	L2  []L2Dev
	FDB []FDBEntry
	// Filter is the filter module's ruleset and interfaces.
	Filter FilterData
	// CT is the conntrack module's settings.
	CT CT
	// VXLAN are the vxlan devices the fast path encapsulates for, VXLANFDB their remotes, and
	// VX what the outer packets need to know of the host.
	VXLAN    []VXLANDev
	VXLANFDB []VXLANFDBEntry
	VX       VXHost
	// VXLANRx are the vxlan devices the fast path decapsulates for.
	VXLANRx []VXLANRx
}

// VXLANRx is a vxlan device the fast path decapsulates for (struct lfp_vxlan_rx).
type VXLANRx struct {
	Dev   int
	Port  uint16
	VNI   uint32
	Local netip.Addr
	MAC   net.HardwareAddr
}

// VXLANDev is a vxlan device the fast path encapsulates for (struct lfp_vxlan_dev).
type VXLANDev struct {
	Ifindex          int
	VNI              uint32
	Local            netip.Addr
	Port             uint16 // destination
	PortMin, PortMax uint16 // source port range
	TTL, TOS         uint8
	UDPCSum          bool // outer UDP checksum (udpcsum)
}

// VXLANFDBEntry is one remote of an encapsulating vxlan device.
type VXLANFDBEntry struct {
	Dev  int
	MAC  net.HardwareAddr
	Dst  netip.Addr
	Port uint16 // 0: the device's
	VNI  uint32
}

// VXHost is what a vxlan device's outer packets, which this host sends, depend on.
type VXHost struct {
	LocalOut4  bool // no rule but nat chains' sees IPv4 packets this host sends
	LocalIn4   bool // nor packets it receives
	HopLimit4  bool // some IPv4 route has a hoplimit metric
	DefaultTTL int
}

// LFP_VX_* flags of struct lfp_config.
const (
	vxLocalOut4 = 1 << iota
	vxLocalIn4
	vxHopLimit4
)

func (v VXHost) flags() uint32 {
	var f uint32
	if v.LocalOut4 {
		f |= vxLocalOut4
	}
	if v.LocalIn4 {
		f |= vxLocalIn4
	}
	if v.HopLimit4 {
		f |= vxHopLimit4
	}
	return f
}

// CT says where netfilter tracks forwarded connections and how Linux refreshes their entries
// (the netns's nf_conntrack_* sysctls).
type CT struct {
	Active4, Active6 bool
	NAT4             bool // translate IPv4 connections (no rule on prerouting or postrouting)
	Checksum         bool // nf_conntrack_checksum: conntrack verifies L4 checksums
	TCPLiberal       bool // nf_conntrack_tcp_be_liberal
	TCPEstablished   time.Duration
	TCPUnack         time.Duration // nf_conntrack_tcp_timeout_unacknowledged
	TCPRetrans       time.Duration // nf_conntrack_tcp_timeout_max_retrans
	TCPMaxRetrans    int
	UDPStream        time.Duration
	UDP              time.Duration // unreplied
}

// LFP_CT_* flags of struct lfp_config.
const (
	ctActive4 = 1 << iota
	ctActive6
	ctTCPLiberal
	ctNAT4
	ctChecksum
)

func (c CT) flags() uint32 {
	var f uint32
	if c.Active4 {
		f |= ctActive4
	}
	if c.Active6 {
		f |= ctActive6
	}
	if c.TCPLiberal {
		f |= ctTCPLiberal
	}
	if c.NAT4 {
		f |= ctNAT4
	}
	if c.Checksum {
		f |= ctChecksum
	}
	return f
}

func ms(d time.Duration) uint32 { return uint32(min(d.Milliseconds(), 1<<32-1)) }

// TCTx is a device a TC program may redirect an skb to (struct lfp_tc_tx).
type TCTx struct {
	Ifindex int
	// Peer: a veth into another namespace with nothing on its own transmit path: deliver with
	// bpf_redirect_peer(); PeerMTU is the peer's MTU.
	Peer    bool
	PeerMTU int
}

const txPeer = 1 // LFP_TX_PEER

// L2Flags are struct lfp_l2_dev's LFP_L2_* flags.
type L2Flags uint32

const (
	L2Bridge     L2Flags = 1 << iota // a bridge device
	L2Forwarding                     // port in STP forwarding state
	L2InOK                           // port: frames received may be fast-pathed
	L2OutOK                          // bridge: routed packets may go through its FDB
	L2Learning                       // port learns: refresh its addresses
	L2Isolated                       // port isolated
	L2NF4                            // br_netfilter validates and trims bridged IPv4
	L2NF6                            // br_netfilter validates and trims bridged IPv6
	L2IP4Off                         // bridged IPv4 goes to Linux
	L2IP6Off                         // bridged IPv6 goes to Linux
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

const fdbLocal = 1 // LFP_FDB_LOCAL

// NeighKey identifies a neighbour entry: device and address.
type NeighKey struct {
	Ifindex int
	Addr    netip.Addr
}

func addrWords(a netip.Addr) (w [4]uint32) {
	if a.Is4() {
		b := a.As4()
		w[0] = binary.NativeEndian.Uint32(b[:])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// Sync brings the maps to data, touching only entries that differ.
func (d *Dataplane) Sync(data Data) error {
	d.mu.Lock()
	defer d.mu.Unlock()

	tx := map[uint32]linuxfpBpfDevmapVal{}
	for _, idx := range data.TxDevs {
		tx[uint32(idx)] = linuxfpBpfDevmapVal{Ifindex: uint32(idx)}
	}
	vx := map[uint32]linuxfpLfpVxlanDev{}
	for _, v := range data.VXLAN {
		vx[uint32(v.Ifindex)] = linuxfpLfpVxlanDev{Vni: v.VNI, Local: addrWords(v.Local)[0], Port: htons(v.Port),
			PortMin: v.PortMin, PortMax: v.PortMax, Ttl: v.TTL, Tos: v.TOS, Udpcsum: uint8(boolU32(v.UDPCSum))}
	}
	vxfdb := map[linuxfpLfpVxfdbKey]linuxfpLfpVxfdbVal{}
	for _, e := range data.VXLANFDB {
		k := linuxfpLfpVxfdbKey{Dev: uint32(e.Dev)}
		copy(k.Mac[:], e.MAC)
		vxfdb[k] = linuxfpLfpVxfdbVal{Dst: addrWords(e.Dst)[0], Vni: e.VNI, Port: htons(e.Port)}
	}
	vxrx := map[linuxfpLfpVxlanRxKey]linuxfpLfpVxlanRx{}
	for _, r := range data.VXLANRx {
		v := linuxfpLfpVxlanRx{Dev: uint32(r.Dev), Local: addrWords(r.Local)[0]}
		copy(v.Mac[:], r.MAC)
		vxrx[linuxfpLfpVxlanRxKey{Port: htons(r.Port), Vni: r.VNI}] = v
	}
	tcTx := map[uint32]linuxfpLfpTcTx{}
	for _, t := range data.TCTx {
		v := linuxfpLfpTcTx{}
		if t.Peer {
			v.Flags, v.PeerMtu = txPeer, uint32(t.PeerMTU)
		}
		tcTx[uint32(t.Ifindex)] = v
	}
	// Written unmarked; the data plane marks an entry once it has handed Linux a packet for it.
	// An entry that stays STALE is not rewritten, so the mark stays until Linux reports a new
	// state (PROBE, REACHABLE ...) and the entry leaves the set.
	stale := map[linuxfpLfpNeighKey]linuxfpLfpStaleVal{}
	for _, k := range data.StaleNeighbours {
		fam := uint32(unix.AF_INET6)
		if k.Addr.Is4() {
			fam = unix.AF_INET
		}
		stale[linuxfpLfpNeighKey{Ifindex: uint32(k.Ifindex), Family: fam, Addr: addrWords(k.Addr)}] = linuxfpLfpStaleVal{}
	}
	l4 := map[uint32]uint8{}
	l6 := map[linuxfpLfpIn6]uint8{}
	for _, a := range data.LocalHosts {
		if a.Is4() {
			l4[addrWords(a)[0]] = 1
		} else {
			l6[linuxfpLfpIn6{A: addrWords(a)}] = 1
		}
	}
	p4 := map[linuxfpLfpLpm4Key]uint8{}
	p6 := map[linuxfpLfpLpm6Key]uint8{}
	for _, p := range data.LocalPrefixes {
		p = p.Masked()
		if p.Addr().Is4() {
			p4[linuxfpLfpLpm4Key{Prefixlen: uint32(p.Bits()), Addr: addrWords(p.Addr())[0]}] = 1
		} else {
			p6[linuxfpLfpLpm6Key{Prefixlen: uint32(p.Bits()), Addr: linuxfpLfpIn6{A: addrWords(p.Addr())}}] = 1
		}
	}

	l2 := map[uint32]linuxfpLfpL2Dev{}
	bridges := uint32(0)
	for _, dv := range data.L2 {
		v := linuxfpLfpL2Dev{Bridge: uint32(dv.Bridge), Flags: uint32(dv.Flags), Mtu: uint32(dv.MTU)}
		copy(v.BrMac[:], dv.BrMAC)
		l2[uint32(dv.Ifindex)] = v
		if dv.Flags&L2Bridge != 0 {
			bridges++
		}
	}
	fdb := map[linuxfpLfpFdbKey]linuxfpLfpFdbVal{}
	for _, e := range data.FDB {
		k := linuxfpLfpFdbKey{Bridge: uint32(e.Bridge)}
		copy(k.Mac[:], e.MAC)
		v := linuxfpLfpFdbVal{Port: uint32(e.Port)}
		if e.Local {
			v.Flags = fdbLocal
		}
		// seen_ns is the data plane's: an entry that did not change is not rewritten (syncMap
		// compares with what it wrote), so its refresh timestamp survives.
		fdb[k] = v
	}

	// Order matters for transparency: entries that make the fast path more conservative (local
	// sources, STALE neighbours) go in before the ones that let it forward (egress devices), and
	// the STALE set before the count that makes the data plane look at it.
	fwFlags, fwBank, fwErr := d.syncFilter(data.Filter)
	var failed Families
	if fwErr != nil {
		// The families whose ruleset changed keep the one written before, which Linux has
		// replaced: the gate holds them before anything else is written.
		// A failure that changed no ruleset (the interfaces' pattern bits) may be stale for both.
		if failed = d.fw.behind(data.Filter); failed == 0 {
			failed = BothFamilies
		}
		if err := d.setGateLocked(d.failed | failed); err != nil {
			return errors.Join(fwErr, err)
		}
	}
	cfg := linuxfpLfpConfig{
		FwFlags:        fwFlags,
		FwBank:         fwBank,
		FwBase:         fwBank * uint32(d.fwCap),
		RouteMtu4:      data.RouteMTU4,
		RouteMtu6:      data.RouteMTU6,
		LocalPrefixes4: boolU32(len(p4) > 0),
		LocalPrefixes6: boolU32(len(p6) > 0),
		StaleNeighs:    uint32(len(stale)),
		Bridges:        bridges,

		CtFlags:            data.CT.flags(),
		CtTcpEstablishedMs: ms(data.CT.TCPEstablished),
		CtTcpUnackMs:       ms(data.CT.TCPUnack),
		CtTcpRetransMs:     ms(data.CT.TCPRetrans),
		CtTcpMaxRetrans:    uint32(data.CT.TCPMaxRetrans),
		CtUdpStreamMs:      ms(data.CT.UDPStream),
		CtUdpMs:            ms(data.CT.UDP),
		Vxlans:             uint32(len(data.VXLAN) + len(data.VXLANRx)),
		VxFlags:            data.VX.flags(),
		DefaultTtl:         uint32(data.VX.DefaultTTL),
		FwdUpdatePrio4:     boolU32(data.FwdUpdatePriority4),
	}
	errs := []error{
		syncMap(d.maps.LfpLocalPfx4, d.pfx4, p4),
		syncMap(d.maps.LfpLocalPfx6, d.pfx6, p6),
		syncMap(d.maps.LfpLocal4, d.local4, l4),
		syncMap(d.maps.LfpLocal6, d.local6, l6),
		syncMap(d.maps.LfpStale, d.stale, stale),
		// FDB before the ports and bridges that make the data plane use it; an entry removed
		// goes first (syncMap deletes before it adds).
		syncMap(d.maps.LfpFdb, d.fdb, fdb),
		syncMap(d.maps.LfpL2, d.l2, l2),
		fwErr,
		d.maps.LfpConfigMap.Put(uint32(0), cfg),
		d.dropOldSets(),
		syncMap(d.maps.LfpTxDevs, d.txDevs, tx),
		syncMap(d.maps.LfpTcTxDevs, d.tcTx, tcTx),
		// Remotes before the devices that make the data plane look them up.
		syncMap(d.maps.LfpVxfdb, d.vxfdb, vxfdb),
		syncMap(d.maps.LfpVxlan, d.vxlan, vx),
		syncMap(d.maps.LfpVxlanRxMap, d.vxrx, vxrx),
	}
	for _, err := range errs {
		// Whatever else failed may decide packets of either family.
		if err != nil && err != fwErr {
			failed = BothFamilies
		}
	}
	// Only now, with everything written, is a family the gate held let through again.
	errs = append(errs, d.setGateLocked(failed))
	return errors.Join(errs...)
}

// syncMap makes m (whose contents are mirrored in cur) equal to want, and updates cur.
func syncMap[K comparable, V comparable](m *ebpf.Map, cur, want map[K]V) error {
	for k := range cur {
		if _, ok := want[k]; !ok {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete from %s: %w", m, err)
			}
			delete(cur, k)
		}
	}
	for k, v := range want {
		if old, ok := cur[k]; ok && old == v {
			continue
		}
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("update %s: %w", m, err)
		}
		cur[k] = v
	}
	return nil
}

// htons turns a port into network byte order as the data plane keeps it.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
