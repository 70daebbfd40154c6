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

// peersIn reads the peers of veths lks, whose peers all live in the namespace nsid (-1: this
// one): one namespace switch and one netlink socket for all of them.
func (f *peerFinder) peersIn(nsid int, lks []*Link) {
	query := func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, lk := range lks {
			pi, err := queryPeer(h, fd, lk.Peer)
			setPeer(lk, pi, err)
		}
		return nil
	}
	var err error
	if nsid < 0 {
		err = query()
	} else {
		err = func() error {
			p, err := f.path(nsid)
			if err != nil {
				return err
			}
			h, err := netns.GetFromPath(p)
			if err != nil {
				return err
			}
			defer h.Close()
			return nsutil.Do(h, query)
		}()
	}
	if err != nil {
		for _, lk := range lks {
			setPeer(lk, peerInfo{offload: OffloadUnknown}, err)
		}
	}
}

// queryPeer reads a peer in the current namespace (fd: a socket there for ethtool).
func queryPeer(h *netlink.Handle, fd, ifindex int) (peerInfo, error) {
	pi := peerInfo{offload: OffloadUnknown}
	l, err := h.LinkByIndex(ifindex)
	if err != nil {
		return pi, fmt.Errorf("peer ifindex %d: %w", ifindex, err)
	}
	pi.mtu = l.Attrs().MTU
	pi.xdp = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
	on, err := ethtoolFlagFD(fd, l.Attrs().Name, unix.ETHTOOL_GTXCSUM)
	if err != nil {
		return pi, err
	}
	pi.offload = OffloadOff
	if on {
		pi.offload = OffloadOn
	}
	return pi, nil
}

func setPeer(lk *Link, pi peerInfo, err error) {
	lk.PeerOffload, lk.PeerMTU, lk.PeerXDP = pi.offload, pi.mtu, pi.xdp
	lk.PeerOffloadErr = ""
	if err != nil {
		lk.PeerOffloadErr = err.Error()
	}
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
	return ethtoolFlagFD(fd, name, cmd)
}

// ethtoolFlagFD is ethtoolFlag through socket fd (of the device's namespace).
func ethtoolFlagFD(fd int, name string, cmd uint32) (bool, error) {
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

// readPeers fills the Peer* and TxOffload fields of the veths need names.
func (f *peerFinder) readPeers(links map[int]*Link, need func(*Link) bool) {
	byNS := map[int][]*Link{}
	for _, lk := range links {
		if lk.Kind != "veth" || !need(lk) {
			continue
		}
		byNS[lk.PeerNetnsID] = append(byNS[lk.PeerNetnsID], lk)
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
	for nsid, lks := range byNS {
		f.peersIn(nsid, lks)
	}
}
