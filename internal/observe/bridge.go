package observe

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"time"

	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func decodeLinkInfo(ad *mnl.AttributeDecoder, lk *Link) {
	var kind, slaveKind string
	var data, slaveData []byte
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_INFO_KIND:
			kind = ad.String()
		case unix.IFLA_INFO_DATA:
			data = ad.Bytes()
		case unix.IFLA_INFO_SLAVE_KIND:
			slaveKind = ad.String()
		case unix.IFLA_INFO_SLAVE_DATA:
			slaveData = ad.Bytes()
		}
	}
	lk.Bridge, lk.Port, lk.VXLAN = nil, nil, nil
	if kind == "bridge" && data != nil {
		lk.Bridge = decodeBridge(data)
	}
	if kind == "vxlan" {
		lk.VXLAN = decodeVXLAN(data)
	}
	if slaveKind == "bridge" && slaveData != nil {
		lk.Port = decodeBridgePort(slaveData)
	}
}

func decodeBridge(b []byte) *BridgeInfo {
	ad, err := mnl.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	bi := &BridgeInfo{}
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_BR_AGEING_TIME: // in USER_HZ (centiseconds)
			bi.AgeingTime = time.Duration(ad.Uint32()) * 10 * time.Millisecond
		case unix.IFLA_BR_VLAN_FILTERING:
			bi.VlanFiltering = ad.Uint8() != 0
		case unix.IFLA_BR_NF_CALL_IPTABLES:
			bi.NFCallIPTables = ad.Uint8() != 0
		case unix.IFLA_BR_NF_CALL_IP6TABLES:
			bi.NFCallIP6Tables = ad.Uint8() != 0
		}
	}
	return bi
}

func decodeBridgePort(b []byte) *BridgePort {
	ad, err := mnl.NewAttributeDecoder(b)
	if err != nil {
		return nil
	}
	p := &BridgePort{}
	for ad.Next() {
		switch ad.Type() {
		case unix.IFLA_BRPORT_STATE:
			p.State = ad.Uint8()
		case unix.IFLA_BRPORT_LEARNING:
			p.Learning = ad.Uint8() != 0
		case unix.IFLA_BRPORT_MODE:
			p.Hairpin = ad.Uint8() != 0
		case unix.IFLA_BRPORT_ISOLATED:
			p.Isolated = ad.Uint8() != 0
		case unix.IFLA_BRPORT_LOCKED:
			p.Locked = ad.Uint8() != 0
		case unix.IFLA_BRPORT_MAB:
			p.MAB = ad.Uint8() != 0
		case unix.IFLA_BRPORT_NEIGH_SUPPRESS, unix.IFLA_BRPORT_NEIGH_VLAN_SUPPRESS:
			p.NeighSuppress = p.NeighSuppress || ad.Uint8() != 0
		case unix.IFLA_BRPORT_BACKUP_PORT:
			p.BackupPort = int(ad.Uint32())
		}
	}
	return p
}

// ntfExtLocked is NTF_EXT_LOCKED (an entry a locked port learned, awaiting authorisation).
const ntfExtLocked = 1 << 1

// readFDB reads every bridge's forwarding database (AF_BRIDGE neighbours whose master is a
// bridge). Entries the bridge module never uses are left out: ones with a VLAN (lookups on a
// bridge without vlan_filtering use VLAN 0; bridges with it are Linux's), locked ones (MAB), and
// the devices' own address lists that the same dump returns (NTF_SELF).
func readFDB(h *netlink.Handle, links map[int]*Link) ([]FDBEntry, error) {
	if !slices.ContainsFunc(slices.Collect(maps.Values(links)), func(lk *Link) bool { return lk.Kind == "bridge" }) {
		return nil, nil // the dump would list every device's own addresses, for nothing
	}
	ns, err := retryDump(func() ([]netlink.Neigh, error) { return h.NeighList(0, unix.AF_BRIDGE) })
	if err != nil {
		return nil, fmt.Errorf("list bridge fdb: %w", err)
	}
	var out []FDBEntry
	for _, n := range ns {
		br := links[n.MasterIndex]
		if br == nil || br.Kind != "bridge" || n.Flags&unix.NTF_SELF != 0 || n.Vlan != 0 ||
			n.FlagsExt&ntfExtLocked != 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		out = append(out, FDBEntry{
			Bridge: br.Index,
			Port:   n.LinkIndex,
			MAC:    append(net.HardwareAddr(nil), n.HardwareAddr...),
			Local:  n.State&unix.NUD_PERMANENT != 0,
		})
	}
	return out, nil
}
