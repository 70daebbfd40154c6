package observe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// Checksum-offload state of a veth's peer: whether the stack behind the peer may hand the veth
// skbs whose TCP/UDP/SCTP checksum is left for "hardware" to finish (CHECKSUM_PARTIAL). Linux's
// forwarding keeps that state with the skb and the final receiver trusts it; a native XDP
// redirect turns the skb into a bare frame and loses it, so the receiver would see a wrong
// checksum. Generic XDP redirects the skb itself and keeps the state.
type Offload int8

const (
	OffloadUnknown Offload = iota // the peer could not be inspected: assume it may
	OffloadOn
	OffloadOff
)

func (o Offload) String() string {
	return [...]string{"unknown", "on", "off"}[o]
}

// peerFinder finds the namespace a veth peer lives in from the id this namespace gave it
// (IFLA_LINK_NETNSID). No namespace is held open between calls: a reference would keep a
// deleted namespace, and the veth in it, alive.
type peerFinder struct {
	paths map[int]string // nsid -> a path that opened it last time
}

func (f *peerFinder) path(nsid int) (string, error) {
	if p, ok := f.paths[nsid]; ok {
		if id, err := nsidOfPath(p); err == nil && id == nsid {
			return p, nil
		}
		delete(f.paths, nsid)
	}
	if f.paths == nil {
		f.paths = map[int]string{}
	}
	// Named namespaces first (ip netns), then every process's.
	cands, _ := filepath.Glob("/run/netns/*")
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	cands = append(cands, procs...)
	seen := map[uint64]bool{}
	for _, p := range cands {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || seen[st.Ino] {
			continue
		}
		seen[st.Ino] = true
		id, err := nsidOfPath(p)
		if err != nil || id < 0 {
			continue
		}
		f.paths[id] = p
		if id == nsid {
			return p, nil
		}
	}
	return "", fmt.Errorf("no namespace with id %d found under /run/netns or /proc", nsid)
}

func nsidOfPath(p string) (int, error) {
	fd, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	return netlink.GetNetNsIdByFd(int(fd.Fd()))
}

// peerInfo is what linuxfp needs to know of a veth's peer, read in the peer's namespace.
type peerInfo struct {
	offload Offload
	mtu     int
	xdp     bool // an XDP program is attached to the peer
}

// peerInfo reads the peer of a veth: its checksum-offload state, MTU and XDP program.
func (f *peerFinder) peerInfo(lk *Link) (peerInfo, error) {
	query := func() (peerInfo, error) {
		pi := peerInfo{offload: OffloadUnknown}
		l, err := netlink.LinkByIndex(lk.Peer)
		if err != nil {
			return pi, fmt.Errorf("peer ifindex %d: %w", lk.Peer, err)
		}
		pi.mtu = l.Attrs().MTU
		pi.xdp = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		on, err := ethtoolFlag(l.Attrs().Name, unix.ETHTOOL_GTXCSUM)
		if err != nil {
			return pi, err
		}
		pi.offload = OffloadOff
		if on {
			pi.offload = OffloadOn
		}
		return pi, nil
	}
	if lk.PeerNetnsID < 0 {
		return query()
	}
	p, err := f.path(lk.PeerNetnsID)
	if err != nil {
		return peerInfo{offload: OffloadUnknown}, err
	}
	h, err := netns.GetFromPath(p)
	if err != nil {
		return peerInfo{offload: OffloadUnknown}, err
	}
	defer h.Close()
	pi := peerInfo{offload: OffloadUnknown}
	err = nsutil.Do(h, func() error {
		var err error
		pi, err = query()
		return err
	})
	return pi, err
}

// ethtoolFlag reads a legacy ethtool feature flag: ETHTOOL_GTXCSUM, whether any of the device's
// IPv4/IPv6/generic transmit checksum offloads is on; ETHTOOL_GTSO, whether TCP segmentation
// offload is. (A hand-written ioctl: golang.org/x/sys has no public SIOCETHTOOL with data, and
// the ethtool netlink libraries do not read features.)
func ethtoolFlag(name string, cmd uint32) (bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	v := struct{ cmd, data uint32 }{cmd: cmd}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte // struct ifreq is 40 bytes
	}
	copy(ifr.name[:], name)
	ifr.data = unsafe.Pointer(&v)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&v)
	if errno != 0 {
		if errors.Is(errno, syscall.EOPNOTSUPP) {
			return false, nil
		}
		return false, fmt.Errorf("ethtool %s: %w", name, errno)
	}
	return v.data != 0, nil
}

// readPeers fills the Peer* fields of every veth.
func (f *peerFinder) readPeers(links map[int]*Link) {
	for _, lk := range links {
		if lk.Kind != "veth" {
			continue
		}
		pi, err := f.peerInfo(lk)
		lk.PeerOffload, lk.PeerMTU, lk.PeerXDP = pi.offload, pi.mtu, pi.xdp
		lk.PeerOffloadErr = ""
		if err != nil {
			lk.PeerOffloadErr = err.Error()
		}
		lk.TxOffload = OffloadUnknown
		csum, err1 := ethtoolFlag(lk.Name, unix.ETHTOOL_GTXCSUM)
		tso, err2 := ethtoolFlag(lk.Name, unix.ETHTOOL_GTSO)
		if err1 == nil && err2 == nil {
			lk.TxOffload = OffloadOff
			if csum && tso {
				lk.TxOffload = OffloadOn
			}
		}
	}
}
