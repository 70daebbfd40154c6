package e2e

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Per-connection consistency under endpoint churn, measured as the Talaria paper does: many
// long-lived TCP connections to a service exchange messages without pause while kube-proxy
// re-syncs its rules again and again with endpoints added and removed (the backends themselves
// stay up). No established connection may break or move: every answer must come from the
// connection's first backend, seeing the same client address, carrying the message unaltered.
// Meanwhile UDP flows run request/response (a flow moves only when its backend was removed:
// kube-proxy deletes its entry) and new connections are opened all along (each must reach an
// endpoint of the rules in force). The same run with Linux alone and with linuxfp at each hook;
// with linuxfp the established connections' packets must have been the fast path's.
func TestKubeProxyChurn(t *testing.T) {
	runs := []struct {
		name, hook string
		linuxfp    bool
	}{{"linux", "tc", false}, {"xdp", "xdp", true}, {"tc", "tc", true}}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			res := kubeChurn(t, r.hook, r.linuxfp)
			t.Logf("%s", res)
			if len(res.violations) > 0 {
				t.Errorf("%d consistency violations:\n%s", len(res.violations), strings.Join(res.violations, "\n"))
			}
		})
	}
}

// churnResult counts what a churn run did.
type churnResult struct {
	tcpConns, udpFlows, churnEvents  int
	tcpMessages, udpDatagrams        uint64
	udpMoves, udpLostAtRemoval       uint64
	newConns                         uint64
	endpointsRemoved, endpointsAdded int
	violations                       []string
	fastPath                         string
}

func (r *churnResult) String() string {
	s := fmt.Sprintf("%d long-lived TCP connections: %d messages; %d UDP flows: %d datagrams answered, %d new entries "+
		"(their endpoint removed), %d lost at the removal of their endpoint; %d new connections; %d churn events "+
		"(%d endpoints removed, %d added); %d violations",
		r.tcpConns, r.tcpMessages, r.udpFlows, r.udpDatagrams, r.udpMoves, r.udpLostAtRemoval, r.newConns,
		r.churnEvents, r.endpointsRemoved, r.endpointsAdded, len(r.violations))
	if r.fastPath != "" {
		s += "; " + r.fastPath
	}
	return s
}

// churnHistory is the endpoint sets kube-proxy loaded, in order, and how often each backend was
// removed: removals counts a removal from before its sync starts, synced once the sync (and its
// conntrack -D) is done.
type churnHistory struct {
	mu       sync.Mutex
	sets     [][]netip.Addr
	removals map[netip.Addr]int
	synced   map[netip.Addr]int
}

// gen is the index of the newest set.
func (h *churnHistory) gen() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sets) - 1
}

// allowed reports whether b is an endpoint of a set in force between generations g1 and g2 (a
// set is recorded before iptables-restore loads it, so the one before g1 may still have been in
// force at g1).
func (h *churnHistory) allowed(g1, g2 int, b netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for g := max(0, g1-1); g <= g2 && g < len(h.sets); g++ {
		if slices.Contains(h.sets[g], b) {
			return true
		}
	}
	return false
}

func (h *churnHistory) removed(b netip.Addr) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removals[b]
}

// syncedAll is every backend's removals synced so far.
func (h *churnHistory) syncedAll() map[netip.Addr]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.synced)
}

func (h *churnHistory) removalsSynced(b netip.Addr) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.synced[b]
}

func kubeChurn(t *testing.T, hook string, withLinuxfp bool) *churnResult {
	t.Helper()
	k := newKubeNode(t, hook, 4, 3)
	client := k.Pods[3] // a pod that is no endpoint: pod-to-service connections
	pool := []netip.Addr{k.Pods[0].IP, k.Remotes[0], k.Pods[1].IP, k.Remotes[1], k.Pods[2].IP, k.Remotes[2]}
	remote := func(a netip.Addr) bool { return slices.Contains(k.Remotes, a) }
	svcIP := kubeServiceIP(4)
	kube := func(eps []netip.Addr) testbed.KubeProxy {
		var tcp, udp []netip.AddrPort
		for _, a := range eps {
			tcp = append(tcp, netip.AddrPortFrom(a, kubeTCPPort))
			udp = append(udp, netip.AddrPortFrom(a, kubeUDPPort))
		}
		return testbed.KubeProxy{ClusterCIDR: kubeClusterNet, Services: []testbed.KubeService{
			kubeSvc("churn", "tcp", svcIP, 80, 30007, tcp...), kubeSvc("churn", "udp", svcIP, 53, 30008, udp...)}}
	}
	current := slices.Clone(pool[:4])
	hist := &churnHistory{sets: [][]netip.Addr{slices.Clone(current)}, removals: map[netip.Addr]int{}, synced: map[netip.Addr]int{}}
	k.sync(t, kube(current))
	k.ctLog = listenCTEvents(t, k.Node)
	var l *testbed.Linuxfp
	if withLinuxfp {
		l = k.startLinuxfp(t)
	}

	res := &churnResult{}
	var vmu sync.Mutex
	violated := func() bool {
		vmu.Lock()
		defer vmu.Unlock()
		return len(res.violations) > 0
	}
	violation := func(f string, a ...any) {
		vmu.Lock()
		defer vmu.Unlock()
		if len(res.violations) < 50 {
			res.violations = append(res.violations, fmt.Sprintf(f, a...))
		}
	}

	// The long-lived connections: from the client through the cluster IP and the NodePort, and
	// from a pod through the cluster IP.
	type origin struct {
		name  string
		proto string
		dst   netip.AddrPort
		pod   bool
	}
	tcpOrigins := []origin{
		{"client -> ClusterIP", "tcp", netip.AddrPortFrom(svcIP, 80), false},
		{"client -> NodePort", "tcp", netip.AddrPortFrom(kubeNodeInIP, 30007), false},
		{"pod -> ClusterIP", "tcp", netip.AddrPortFrom(svcIP, 80), true},
	}
	udpOrigins := []origin{
		{"client -> ClusterIP", "udp", netip.AddrPortFrom(svcIP, 53), false},
		{"client -> NodePort", "udp", netip.AddrPortFrom(kubeNodeInIP, 30008), false},
		{"pod -> ClusterIP", "udp", netip.AddrPortFrom(svcIP, 53), true},
	}
	var id atomic.Int64
	id.Store(2000)
	dial := func(o origin) (*svcConn, error) {
		ns := k.Client
		if o.pod {
			ns = client.NS
		}
		sc, err := dialService(ns, o.name, o.proto, o.dst, int(id.Add(1)))
		if err != nil {
			return nil, err
		}
		t.Cleanup(sc.close)
		return sc, nil
	}
	type longLived struct {
		sc     *svcConn
		origin origin
		n      atomic.Uint64
	}
	var tcps, udps []*longLived
	for i := range 50 {
		o := tcpOrigins[min(i/20, 2)] // 20, 20 and 10
		sc, err := dial(o)
		if err != nil {
			t.Fatal(err)
		}
		tcps = append(tcps, &longLived{sc: sc, origin: o})
	}
	for i := range 12 {
		sc, err := dial(udpOrigins[i%3])
		if err != nil {
			t.Fatal(err)
		}
		udps = append(udps, &longLived{sc: sc, origin: udpOrigins[i%3]})
	}
	res.tcpConns, res.udpFlows = len(tcps), len(udps)
	// Established, before the churn starts: UDP entries ASSURED and, with linuxfp, TCP ones
	// marked liberal (the fast path has them all).
	eventually(t, 8*time.Second, "long-lived connections established", func() error {
		var errs []string
		for _, c := range append(slices.Clone(tcps), udps...) {
			if err := c.sc.exchange(1, 1000); err != nil {
				t.Fatal(err)
			}
			if !hist.allowed(0, 0, c.sc.backend) {
				t.Fatalf("%s: answered by %s, no endpoint", c.sc, c.sc.backend)
			}
			if err := k.fastPathReady(c.sc); err != nil && (c.sc.udp || withLinuxfp) {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%d not ready, e.g. %s", len(errs), errs[0])
		}
		return nil
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range tcps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Up to 3000 bytes: some messages take several segments.
				if err := c.sc.exchange(1, 3000); err != nil {
					violation("%s (to %s): broken or moved after %d messages: %v", c.sc, c.sc.backend, c.sc.n, err)
					return
				}
				c.n.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	var moves, lost atomic.Uint64
	for _, c := range udps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// removed: the backend's removals synced before the flow's entry was made; one
			// counted since then explains a move.
			removed := hist.removed(c.sc.backend)
			for {
				select {
				case <-stop:
					return
				default:
				}
				// The removals synced before the datagram is sent: the entry it makes can be
				// deleted by any later sync, even of a removal counted before it was sent.
				g1, r1, r0 := hist.gen(), hist.removalsSynced(c.sc.backend), hist.syncedAll()
				b, p, err := c.sc.roundTrip(1400, 2*time.Second)
				g2 := hist.gen()
				switch {
				case errors.Is(err, os.ErrDeadlineExceeded) && hist.removalsSynced(c.sc.backend) > r1:
					// Its backend's removal was synced meanwhile: kube-proxy deleted the entry
					// while the answer was on its way back, which then met no entry (as with
					// Linux alone). The flow carries on with its next datagram.
					lost.Add(1)
					c.sc.n++
					continue
				case err != nil:
					violation("%s (to %s): %v", c.sc, c.sc.backend, err)
					return
				case (b != c.sc.backend || p != c.sc.peer) && hist.removed(c.sc.backend) == removed:
					violation("%s: answered by %s seeing %s, then by %s seeing %s, and %s was not removed; its entries:%s", c.sc, c.sc.backend, c.sc.peer, b, p, c.sc.backend, k.ctLog.of(c.sc.local().String()))
					return
				case b != c.sc.backend && !hist.allowed(g1, g2, b):
					violation("%s: moved from %s to %s, not an endpoint then", c.sc, c.sc.backend, b)
					return
				case b != c.sc.backend || p != c.sc.peer:
					// Its backend was removed, so its entry deleted: a new entry, to another
					// backend, or to the same one re-added (with another MASQUERADE port, or
					// the pod's port changed by NAT where the answer lost at the removal left
					// an entry with its tuple).
					moves.Add(1)
					c.sc.backend, c.sc.peer = b, p
					removed = r0[b]
				}
				c.n.Add(1)
				time.Sleep(3 * time.Millisecond)
			}
		}()
	}
	// New connections all along, alternately TCP and UDP from each origin, one exchange each.
	var newConns atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		origins := append(slices.Clone(tcpOrigins), udpOrigins...)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o := origins[i%len(origins)]
			g1 := hist.gen()
			sc, err := dial(o)
			if err == nil {
				_, _, err = sc.roundTrip(1000, 2*time.Second)
				sc.close()
			}
			if err != nil {
				violation("new connection %s: %v", o.name+" "+o.proto, err)
				return
			}
			if g2 := hist.gen(); !hist.allowed(g1, g2, sc.backend) {
				violation("new connection %s reached %s, not an endpoint of the rules in force", sc, sc.backend)
			}
			newConns.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}()

	var s0 kubeSnap
	if l != nil {
		s0 = kubeSnapshot(t, l)
	}
	counts := func(cs []*longLived, pick func(*longLived) bool) uint64 {
		var n uint64
		for _, c := range cs {
			if pick(c) {
				n += c.n.Load()
			}
		}
		return n
	}
	// What the fast path should have forwarded at in0 from here: the client's requests on its
	// long-lived TCP connections (at XDP, those to remote backends only: nothing can be
	// redirected into a pod's veth there).
	fastTCP := func(c *longLived) bool { return !c.origin.pod && (hook == "tc" || remote(c.sc.backend)) }
	tcp0 := counts(tcps, fastTCP)

	// The churn: kube-proxy syncs every 200 ms, an endpoint added or removed each time (two at
	// least, all six at most).
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) && !violated() {
		time.Sleep(200 * time.Millisecond)
		next := slices.Clone(current)
		if len(current) > 2 && (len(current) == len(pool) || rng.Intn(2) == 0) {
			gone := current[rng.Intn(len(current))]
			next = slices.DeleteFunc(next, func(a netip.Addr) bool { return a == gone })
			res.endpointsRemoved++
			// Counted as removed before the sync: a flow may move from the moment its entry
			// can be deleted.
			hist.mu.Lock()
			hist.removals[gone]++
			hist.sets = append(hist.sets, next)
			hist.mu.Unlock()
		} else {
			var out []netip.Addr
			for _, a := range pool {
				if !slices.Contains(current, a) {
					out = append(out, a)
				}
			}
			next = append(next, out[rng.Intn(len(out))])
			res.endpointsAdded++
			hist.mu.Lock()
			hist.sets = append(hist.sets, next)
			hist.mu.Unlock()
		}
		k.sync(t, kube(next))
		for _, a := range current {
			if !slices.Contains(next, a) {
				hist.mu.Lock()
				hist.synced[a]++
				hist.mu.Unlock()
			}
		}
		current = next
		res.churnEvents++
	}
	// Let the last sync take effect on the flows, then stop.
	time.Sleep(300 * time.Millisecond)
	tcp1 := counts(tcps, fastTCP)
	var d kubeSnap
	if l != nil {
		d = kubeSnapshot(t, l).sub(s0)
	}
	close(stop)
	wg.Wait()

	res.tcpMessages = counts(tcps, func(*longLived) bool { return true })
	res.udpDatagrams = counts(udps, func(*longLived) bool { return true })
	res.udpMoves, res.udpLostAtRemoval, res.newConns = moves.Load(), lost.Load(), newConns.Load()
	for _, c := range tcps {
		if c.n.Load() == 0 {
			violation("%s (to %s): no message exchanged during the churn", c.sc, c.sc.backend)
		}
	}
	if res.churnEvents < 10 {
		violation("only %d churn events", res.churnEvents)
	}
	if l != nil {
		res.fastPath = fmt.Sprintf("during the churn in0 %s; out0 %s", d["in0"], d["out0"])
		// The long-lived connections' requests were the fast path's: at least one packet per
		// message. (in0 also counts the new connections' packets, and the UDP flows'.)
		if want := tcp1 - tcp0; d["in0"].forwarded < want {
			violation("in0 forwarded %d packets while the client's long-lived TCP connections it could take sent %d messages", d["in0"].forwarded, want)
		}
		if d["in0"].forwarded == 0 || d["out0"].forwarded == 0 {
			violation("nothing fast-pathed: in0 %s; out0 %s", d["in0"], d["out0"])
		}
	}
	return res
}
