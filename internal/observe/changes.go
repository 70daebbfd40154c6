package observe

import (
	"encoding/binary"
	"sync"
	"time"

	mnl "github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// changeLog records which links the events named, so that a burst of link events (200 veths
// deleted) costs a dump of the links and the facts of the links it named, not every link's
// facts per event: those cost several system calls per link (ethtool, tcx queries, a namespace
// switch per veth peer, sysctl files), and with every event re-reading them all the controller
// slowed the very deletions it followed.
//
// The watcher records before it sends the event, and Refresh takes the kinds it re-reads: a
// change recorded meanwhile is either taken by that Refresh (which reads after the change) or
// left for the next.
type changeLog struct {
	mu sync.Mutex
	// all: the kinds whose facts every link must re-read (an event source overflowed, or an
	// event named no link, as a sysctl write seen by the cgroup hook).
	all Dirty
	// links: the kinds to re-read per ifindex of this namespace.
	links map[int]Dirty
	// peers: veth peers in other namespaces that changed (their veth here re-reads its peer).
	peers map[peerRef]bool
	// barriers: settle's requests waiting for their acknowledgement, by sequence number.
	barriers map[uint32]chan struct{}
	seq      uint32
}

// settle returns once every rtnetlink notification queued on w's event socket before it was
// called has been recorded: it sends NLMSG_NOOP with NLM_F_ACK on that socket, whose
// acknowledgement is queued behind them. A change the netlink watcher counted in the fence was
// applied, and its notification queued, before it was counted (netlink_unicast_kernel() runs
// the handler, then consume_skb()), so after settle the log names every link such a change
// touched, and a read may open the fence for it. false: no acknowledgement in time (then every
// link is re-read).
func (w *Watcher) settle(timeout time.Duration) bool {
	l := &w.changes
	l.mu.Lock()
	if l.barriers == nil {
		l.barriers = map[uint32]chan struct{}{}
	}
	l.seq++
	seq, done := l.seq|1<<31, make(chan struct{})
	l.barriers[seq] = done
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.barriers, seq)
		l.mu.Unlock()
	}()
	if _, err := w.rt.Send(mnl.Message{Header: mnl.Header{Type: unix.NLMSG_NOOP, Flags: mnl.Request | mnl.Acknowledge, Sequence: seq}}); err != nil {
		return false
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// settled: the acknowledgement of settle's request seq arrived.
func (l *changeLog) settled(seq uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if done := l.barriers[seq]; done != nil {
		close(done)
		delete(l.barriers, seq)
	}
}

// peerRef is a link in another namespace: the id this namespace gave that namespace, and the
// ifindex there.
type peerRef struct{ nsid, ifindex int }

func (l *changeLog) addAll(d Dirty) {
	l.mu.Lock()
	l.all |= d
	l.mu.Unlock()
}

func (l *changeLog) addLink(ifindex int, d Dirty) {
	l.mu.Lock()
	if l.links == nil {
		l.links = map[int]Dirty{}
	}
	l.links[ifindex] |= d
	l.mu.Unlock()
}

func (l *changeLog) addPeer(p peerRef) {
	l.mu.Lock()
	if l.peers == nil {
		l.peers = map[peerRef]bool{}
	}
	l.peers[p] = true
	l.mu.Unlock()
}

// take removes and returns what a Refresh of kinds d re-reads; other kinds stay recorded.
func (l *changeLog) take(d Dirty) changeSet {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := changeSet{all: l.all & d, links: map[int]Dirty{}}
	l.all &^= d
	for idx, k := range l.links {
		if k&d != 0 {
			cs.links[idx] = k & d
		}
		if k &^= d; k == 0 {
			delete(l.links, idx)
		} else {
			l.links[idx] = k
		}
	}
	if d&DirtyLinks != 0 {
		cs.peers, l.peers = l.peers, nil
	}
	return cs
}

// changeSet is what one Refresh re-reads of the per-link facts.
type changeSet struct {
	all   Dirty
	links map[int]Dirty
	peers map[peerRef]bool
}

// namedLinks lists the links whose link attributes changed, if events named them all.
func (cs changeSet) namedLinks() ([]int, bool) {
	if cs.all&DirtyLinks != 0 {
		return nil, false
	}
	var idxs []int
	for idx, k := range cs.links {
		if k&DirtyLinks != 0 {
			idxs = append(idxs, idx)
		}
	}
	return idxs, true
}

// needs: link lk (old: as the last read saw it, nil if new) must re-read its facts of kind k.
func (cs changeSet) needs(k Dirty, lk, old *Link) bool {
	if old == nil || old.Name != lk.Name || old.Kind != lk.Kind || old.Peer != lk.Peer || old.PeerNetnsID != lk.PeerNetnsID {
		return true
	}
	// A changed link re-reads everything it carries (sysctl directories, qdiscs, its peer).
	if m := k | DirtyLinks; cs.all&m != 0 || cs.links[lk.Index]&m != 0 {
		return true
	}
	if k != DirtyLinks || lk.Kind != "veth" {
		return false
	}
	// A veth's peer facts change with its peer: here, or in another namespace.
	if lk.PeerNetnsID < 0 {
		return cs.links[lk.Peer]&DirtyLinks != 0
	}
	return cs.peers[peerRef{lk.PeerNetnsID, lk.Peer}]
}

// recordRoute notes the link an rtnetlink message of this namespace is about: links (struct
// ifinfomsg), tc objects (struct tcmsg) and netconf (NETCONFA_IFINDEX). A message that names
// no link marks its kinds for every link.
func (l *changeLog) recordRoute(m mnl.Message, d Dirty) {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK, unix.RTM_NEWQDISC, unix.RTM_DELQDISC,
		unix.RTM_NEWTFILTER, unix.RTM_DELTFILTER, unix.RTM_NEWCHAIN, unix.RTM_DELCHAIN:
		// ifinfomsg and tcmsg both hold the ifindex at offset 4.
		if len(m.Data) >= 8 {
			l.addLink(int(int32(binary.NativeEndian.Uint32(m.Data[4:8]))), d)
			return
		}
		l.addAll(d)
	case unix.RTM_NEWNETCONF, unix.RTM_DELNETCONF:
		// struct netconfmsg is one byte, padded to 4, then attributes.
		if idx, ok := netconfIfindex(m.Data); ok && idx > 0 {
			l.addLink(idx, d)
			return
		}
		// NETCONFA_IFINDEX_ALL / _DEFAULT: the "all" or "default" settings.
		l.addAll(d)
	}
}

const netconfaIfindex = 1 // NETCONFA_IFINDEX

func netconfIfindex(b []byte) (int, bool) {
	if len(b) < 4 {
		return 0, false
	}
	ad, err := mnl.NewAttributeDecoder(b[4:])
	if err != nil {
		return 0, false
	}
	for ad.Next() {
		if ad.Type() == netconfaIfindex {
			return int(int32(ad.Uint32())), true
		}
	}
	return 0, false
}
