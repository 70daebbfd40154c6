// Package status is the interface between a running `linuxfp run` and `linuxfp status` (and the
// benchmarks): JSON over HTTP on an abstract unix socket. Abstract sockets belong to a network
// namespace, so each namespace's controller is found at the same name, and the socket vanishes
// with the process: nothing is left behind.
package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/linuxfp/linuxfp/internal/nsutil"
)

// SocketName is the abstract unix socket ("@linuxfp") of the controller of this namespace.
const SocketName = "@linuxfp"

// ErrNotRunning: no controller runs in this network namespace.
var ErrNotRunning = errors.New("linuxfp is not running in this network namespace")

// ErrNotAllowed: the controller answers only root or a process holding CAP_NET_ADMIN.
var ErrNotAllowed = errors.New("linuxfp's status needs root or CAP_NET_ADMIN")

// Status is the answer to GET /v1/status.
type Status struct {
	// Version and Commit: the running daemon's build (linuxfp version).
	Version     string    `json:"version,omitempty"`
	Commit      string    `json:"commit,omitempty"`
	PID         int       `json:"pid"`
	StartedAt   time.Time `json:"started_at"`
	HookOption  string    `json:"hook_option"`
	SysctlWatch string    `json:"sysctl_watch"`
	IPSetWatch  string    `json:"ipset_watch"`
	FDBWatch    string    `json:"fdb_watch,omitempty"`
	NeighWatch  string    `json:"neigh_watch,omitempty"`
	// CtFreeWatch says whether and how linuxfp sees conntrack entries freed (the conntrack
	// cache is used only with it).
	CtFreeWatch string `json:"ct_free_watch,omitempty"`
	// NetlinkChanges: configuration changes the netlink watcher saw as they were made, by
	// class (link, address, route, neighbour, tc, other, nftables, ipset).
	NetlinkChanges map[string]uint64 `json:"netlink_changes,omitempty"`
	// IPSetReads: how many times the ipsets were read (each change, with ipset_watch events).
	IPSetReads       uint64  `json:"ipset_reads"`
	NetfilterBackend string  `json:"netfilter_backend"`
	Events           uint64  `json:"events"`
	Applies          uint64  `json:"applies"`
	LastApply        *Change `json:"last_apply,omitempty"`
	// Busy: the controller is applying a change right now.
	Busy bool `json:"busy"`
	// ApplyError: the last apply could not bring the data plane to Linux's configuration
	// (since ApplyErrorSince); it is retried. FamiliesToLinux: the families whose packets all
	// go to Linux meanwhile (counted as apply_failed), because what governs them could not be
	// written.
	ApplyError      string     `json:"apply_error,omitempty"`
	ApplyErrorSince *time.Time `json:"apply_error_since,omitempty"`
	FamiliesToLinux []string   `json:"families_to_linux,omitempty"`
	// FenceWatch: configuration changes are counted as they are made (the fence), so the fast
	// path hands a family's packets to Linux from the moment Linux applied a change of it until
	// the data plane follows it. Fenced: the families waiting for that right now. FenceCounts:
	// per unit (ipv4, ipv6, sysctl), the changes the fence has counted since linuxfp started
	// (a change that cannot affect what the data plane holds is not counted: see
	// bpf/netlink_watch.c).
	FenceWatch  bool              `json:"fence_watch"`
	Fenced      []string          `json:"fenced,omitempty"`
	FenceCounts map[string]uint64 `json:"fence_counts,omitempty"`
	// FilterRules: per netfilter rule (or chain policy), the packets the fast path matched with
	// it (rules of a jump's path included); iptables -v counts only what Linux saw.
	FilterRules []FilterRule `json:"filter_rules,omitempty"`
	// FibCache: per family, whether the FIB cache answers the router's lookups (bpf/lib/
	// fibcache.h) or why not.
	FibCache []FibCacheFamily `json:"fib_cache,omitempty"`
	// FDBEntries: bridge forwarding-database entries mirrored into the data plane (the frames
	// that keep learned ones fresh in Linux are counted as bridge_refresh; bpf/lib/fdb.h).
	FDBEntries int `json:"fdb_entries"`
	// Conntrack: the families whose forwarded connections netfilter tracks (the conntrack
	// module runs); CTLiberal counts TCP connections marked liberal for the fast path,
	// CTLiberalFailed the marks that failed (the connection was gone, mostly).
	Conntrack       []string `json:"conntrack,omitempty"`
	CTLiberal       uint64   `json:"ct_liberal"`
	CTLiberalFailed uint64   `json:"ct_liberal_failed"`
	// ProgramKinds: verified programs held, one per kind of interface (modules, families, hook),
	// each shared by every interface of its kind; ProgramsVerified: programs the kernel verified
	// since the start (a kind no interface had yet).
	ProgramKinds     int         `json:"program_kinds"`
	ProgramsVerified uint64      `json:"programs_verified"`
	Interfaces       []Interface `json:"interfaces"`
}

// Interface is one interface's state.
type Interface struct {
	Ifindex int    `json:"ifindex"`
	Name    string `json:"name"`
	Kind    string `json:"kind,omitempty"`
	MAC     string `json:"mac,omitempty"`
	MTU     int    `json:"mtu"`
	Master  string `json:"master,omitempty"` // the bridge (or bond, vrf) it is enslaved to
	Up      bool   `json:"up"`
	Carrier bool   `json:"carrier"`
	// Peer is a veth's peer ifindex, in the namespace with id PeerNetnsID (-1: this one).
	Peer        int      `json:"peer_ifindex,omitempty"`
	PeerNetnsID int      `json:"peer_netnsid,omitempty"`
	Program     *Program `json:"program,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	// Egress: XDP programs may redirect frames out of it (EgressNote: why not). TCEgress: tc
	// programs may redirect skbs out of it; TCPeer: straight into its veth peer's namespace.
	Egress     bool   `json:"egress"`
	EgressNote string `json:"egress_note,omitempty"`
	TCEgress   bool   `json:"tc_egress"`
	TCPeer     bool   `json:"tc_peer,omitempty"`
	// Forwarded counts packets the fast path routed, Bridged those it switched to another
	// bridge port; Passed, those it handed to Linux, by reason. Linux's own counters (ip -s
	// link, nstat IpForwDatagrams, bridge -s fdb) do not see fast-pathed ones.
	Forwarded Counter `json:"forwarded"`
	Bridged   Counter `json:"bridged"`
	// Encapsulated counts packets the fast path routed into a vxlan device and encapsulated
	// itself (Forwarded does not include them).
	Encapsulated Counter `json:"encapsulated"`
	// Decapsulated counts VXLAN packets for a local device the fast path decapsulated (and
	// handed to the device's receive path).
	Decapsulated Counter `json:"decapsulated"`
	// Dropped counts packets the filter module dropped at XDP (a netfilter rule or policy
	// would have dropped them; iptables -v does not count them).
	Dropped Counter `json:"filter_dropped"`
	// ToTC counts packets the XDP program handed, marked, to the tc program after it (see
	// Program.TCAfterXDP): the tc program's own outcome for them is counted as well, above.
	ToTC   Counter            `json:"to_tc,omitempty"`
	Passed map[string]Counter `json:"passed,omitempty"`
}

// Program is the program attached to an interface.
type Program struct {
	ID          uint32    `json:"id"`
	Hook        string    `json:"hook"`
	Modules     []string  `json:"modules"`
	Families    []string  `json:"families"`
	InstalledAt time.Time `json:"installed_at"`
	// TCAfterXDP: the XDP program has a tc program after it, id TCID, for the packets only an
	// skb can take (see graph.tcAfterXDP for why).
	TCAfterXDP bool   `json:"tc_after_xdp,omitempty"`
	TCID       uint32 `json:"tc_id,omitempty"`
}

// Counter is packets and bytes.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Change records one reaction to a burst of events.
type Change struct {
	Seq        uint64    `json:"seq"`
	FirstEvent time.Time `json:"first_event"` // when the first event of the burst arrived
	LastEvent  time.Time `json:"last_event"`
	Events     int       `json:"events"`
	Dirty      string    `json:"dirty"`
	Applied    time.Time `json:"applied"`  // when the data plane reflected them
	Programs   int       `json:"programs"` // programs installed, replaced or removed
	// Verified: programs the kernel verified for it; the others reused a verified program of
	// the same kind (see internal/dataplane/programs.go).
	Verified int    `json:"verified"`
	Err      string `json:"error,omitempty"`
}

// Client talks to the controller of the current network namespace. Create it in the namespace
// you mean: the socket is resolved when connecting.
type Client struct {
	hc *http.Client
	// stream: the same connections without the time limit, for GET /v1/monitor.
	stream *http.Client
}

// NewClient returns a client for the controller of the calling thread's namespace at dial time.
func NewClient() *Client {
	return NewClientWithDialer(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", SocketName)
	})
}

// NewClientWithDialer returns a client that connects with dial (for instance from inside another
// network namespace).
func NewClientWithDialer(dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(ctx)
			if err != nil {
				return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
			}
			return c, nil
		},
		DisableKeepAlives: true,
	}
	return &Client{hc: &http.Client{Timeout: 5 * time.Second, Transport: tr}, stream: &http.Client{Transport: tr}}
}

func (c *Client) get(path string, v any) error {
	resp, err := c.open(context.Background(), c.hc, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// open sends GET path and returns the response of a 200, or the error the answer means.
func (c *Client) open(ctx context.Context, hc *http.Client, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://linuxfp"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" && !errors.Is(err, ErrNoNetns) {
			return nil, ErrNotRunning
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode == http.StatusForbidden {
			return nil, fmt.Errorf("%w (%s)", ErrNotAllowed, bytes.TrimSpace(b))
		}
		if resp.StatusCode == http.StatusBadRequest {
			return nil, errors.New(string(bytes.TrimSpace(b)))
		}
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return resp, nil
}

// Status fetches the full status.
func (c *Client) Status() (*Status, error) {
	var s Status
	return &s, c.get("/v1/status", &s)
}

// StatusVerbose is Status with every filter rule that hands packets to Linux in FilterRules,
// counted or not.
func (c *Client) StatusVerbose() (*Status, error) {
	var s Status
	return &s, c.get("/v1/status?verbose=1", &s)
}

// Changes returns the recorded changes with Seq > since (the most recent ones are kept).
func (c *Client) Changes(since uint64) ([]Change, error) {
	var ch []Change
	return ch, c.get(fmt.Sprintf("/v1/changes?since=%d", since), &ch)
}

// FilterRule is one netfilter rule's fast-path counter: the packets the fast path decided with
// it, and what it did with them (Outcome: dropped, matched, or linux: handed to Linux, Why says why).
type FilterRule struct {
	Family  string  `json:"family"`
	Rule    string  `json:"rule"`
	Outcome string  `json:"outcome,omitempty"`
	Why     string  `json:"why,omitempty"`
	Counter Counter `json:"counter"`
}

// ErrNoNetns: no network namespace of that name (ip netns add makes them under /run/netns).
var ErrNoNetns = errors.New("no such network namespace")

// NewClientInNetns returns a client for the controller of the network namespace name, as `ip -n`
// finds it: a name under /run/netns (a path, /proc/PID/ns/net say, when it has a slash). Each
// dial enters the namespace on a locked OS thread, creates the socket there (an abstract socket
// belongs to the namespace its socket was created in) and returns the thread.
func NewClientInNetns(name string) (*Client, error) {
	open := func() (netns.NsHandle, error) {
		var h netns.NsHandle
		var err error
		if strings.ContainsRune(name, '/') {
			h, err = netns.GetFromPath(name)
		} else {
			h, err = netns.GetFromName(name)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return h, fmt.Errorf("network namespace %s: %w (ip netns list shows those there are)", name, ErrNoNetns)
		}
		if err != nil {
			return h, fmt.Errorf("open network namespace %s: %w", name, err)
		}
		return h, nil
	}
	h, err := open()
	if err != nil {
		return nil, err
	}
	h.Close()
	return NewClientWithDialer(func(ctx context.Context) (net.Conn, error) {
		h, err := open()
		if err != nil {
			return nil, err
		}
		defer h.Close()
		var c net.Conn
		err = nsutil.Do(h, func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, "unix", SocketName)
			return err
		})
		return c, err
	}), nil
}

// FibCacheFamily is the FIB cache's state for one family.
type FibCacheFamily struct {
	Family string   `json:"family"`
	On     bool     `json:"on"`
	Off    []string `json:"off_because,omitempty"`
}
