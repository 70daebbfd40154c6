package dataplane

import (
	"net"
	"net/netip"
)

// The vxlan module (bpf/lib/vxlan.h): encapsulates what the router sends into a vxlan device,
// and decapsulates VXLAN packets for a local vxlan device, as the vxlan driver would.

// VXLANData is what the vxlan module reads.
type VXLANData struct {
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

func (v VXHost) flags() linuxfpLfpVxFlags {
	var f linuxfpLfpVxFlags
	if v.LocalOut4 {
		f |= linuxfpLfpVxFlagsLFP_VX_LOCAL_OUT4
	}
	if v.LocalIn4 {
		f |= linuxfpLfpVxFlagsLFP_VX_LOCAL_IN4
	}
	if v.HopLimit4 {
		f |= linuxfpLfpVxFlagsLFP_VX_HOPLIMIT4
	}
	return f
}

// vxlanMaps mirror what the vxlan module's maps hold.
type vxlanMaps struct {
	vxlan map[uint32]linuxfpLfpVxlanDev
	vxfdb map[linuxfpLfpVxfdbKey]linuxfpLfpVxfdbVal
	vxrx  map[linuxfpLfpVxlanRxKey]linuxfpLfpVxlanRx
}

func newVXLANMaps() vxlanMaps {
	return vxlanMaps{
		vxlan: map[uint32]linuxfpLfpVxlanDev{},
		vxfdb: map[linuxfpLfpVxfdbKey]linuxfpLfpVxfdbVal{},
		vxrx:  map[linuxfpLfpVxlanRxKey]linuxfpLfpVxlanRx{},
	}
}

// The devices let the fast path forward into and out of a tunnel: they go in after lfp_config,
// the remotes before the devices that make the data plane look them up.
func (x *vxlanMaps) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
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
	cfg.Vxlans = uint32(len(data.VXLAN) + len(data.VXLANRx))
	cfg.VxFlags = data.VX.flags()
	cfg.DefaultTtl = uint32(data.VX.DefaultTTL)
	return nil, []func() error{
		func() error { return syncMap(d.maps.LfpVxfdb, x.vxfdb, vxfdb) },
		func() error { return syncMap(d.maps.LfpVxlan, x.vxlan, vx) },
		func() error { return syncMap(d.maps.LfpVxlanRxMap, x.vxrx, vxrx) },
	}
}

// vxlanSettings: whether the tc program routes what it decapsulates itself (Spec.VXLANRxRoute).
func vxlanSettings(k *settings, s Spec, companion bool) {
	k.VxlanRxRoute = boolU32(s.VXLANRxRoute && (s.Hook == HookTC || companion))
}
