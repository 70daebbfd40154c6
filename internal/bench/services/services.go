package services

// The services benchmark: Kubernetes services through kube-proxy's rules on one node, in its
// iptables mode or its nftables mode (testbed.NewServices), with Linux alone and with linuxfp in the node, for 1, 100 and 1,000
// services, and the MASQUERADE case (pods reaching a host outside the cluster through the node).
//
// Per case, workloads (each with Linux and linuxfp alternating round by round):
//   - crr: connection per request: connect to a random service's cluster IP, a 64-byte request,
//     a 256-byte response, the client closes; many workers at once (connections/s, and the time
//     from connect() to the response);
//   - rr: long-lived connections, one byte each way per transaction (netperf's TCP_RR):
//     transactions/s and latency;
//   - upload, download: long-lived bulk streams (Gbit/s of payload received);
//   - download-halfclosed: download, with the client's sending side shut down after its request
//     (busybox nc, HTTP/1.0 clients): the connection's entry is in CLOSE_WAIT for the transfer;
//   - udp: the established-flow packet rate through the NAT: the XDP generator sends UDP flows
//     to the services' cluster IPs (port 9), one flow per service; the first packet of each
//     creates its conntrack entry (kube-proxy's DNAT and masquerade), and what arrives at the
//     endpoints is counted by an XDP sink on every pod's eth0 (Mpps).
// In the masquerade case the clients are the pods and the server the outside host (TCP to port
// 8080, UDP to port 9 from one pod's generator). With IPv6 among the families the node is
// dual-stack (kube-proxy's IPv6 rules beside the IPv4 ones, in the same mode): after each service
// count's IPv4 case, an IPv6 case measures every workload from the client to the services' IPv6
// cluster IPs, and after the IPv4 from-pods case an IPv6 one from the pods' IPv6 addresses (the
// masquerade case stays IPv4's: the outside host has no IPv6 address).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Workload is one kind of traffic of the services benchmark.
type Workload string

const (
	CRR      Workload = "crr"      // a connection per request
	RR       Workload = "rr"       // request/response on long-lived connections
	Upload   Workload = "upload"   // bulk, client -> endpoint
	Download Workload = "download" // bulk, endpoint -> client
	// DownloadHalfClosed is Download with the client's FIN sent after its request.
	DownloadHalfClosed Workload = "download-halfclosed"
	UDP                Workload = "udp" // established UDP flows from the XDP generator
)

// Workloads lists the workloads in report order.
var Workloads = []Workload{CRR, RR, Upload, Download, DownloadHalfClosed, UDP}

// ParseWorkload checks a workload's name.
func ParseWorkload(s string) (Workload, error) {
	return harness.ParseName(Workloads, "workload", s)
}

// unit is what the workload's value counts.
func (w Workload) unit() string {
	switch w {
	case CRR:
		return "conn/s"
	case RR:
		return "trans/s"
	case Upload, Download, DownloadHalfClosed:
		return "Gbit/s"
	}
	return "Mpps"
}

// Modes are the modes the services benchmark runs: Linux alone, linuxfp as a user runs
// it (--hook auto: native XDP on in0 and out0, whose peers compute their checksums, tc on the
// pods' veths) and linuxfp with --hook tc everywhere. There is no hand-written ceiling: a NAT
// that reads the kernel's conntrack table is what linuxfp is.
var Modes = []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp, harness.ModeLinuxfpTC}

// Case is one configuration of the node measured: a number of services, or the
// masquerade case.
type Case struct {
	// Services: the kube-proxy services loaded (in the masquerade case: those of the last
	// services case, or none).
	Services int `json:"services"`
	// Masquerade: pods -> outside host, masqueraded by Flannel's rule; otherwise client ->
	// services' cluster IPs.
	Masquerade bool `json:"masquerade,omitempty"`
	// FromPods: the pods are the clients of the services (those of the last services case):
	// an endpoint on another pod is reached through the bridge (br_netfilter bridges the DNAT'd
	// packets), one on the client pod itself back out of its own port.
	FromPods bool `json:"from_pods,omitempty"`
	// IPv6: to the services' IPv6 cluster IPs, from the client's or (FromPods) the pods' IPv6
	// addresses.
	IPv6 bool `json:"ipv6,omitempty"`
}

// podClients: the case's clients (and udp generator) are the pods.
func (c Case) podClients() bool { return c.Masquerade || c.FromPods }

// genKey names the generator a case uses (its flows differ by case).
func (c Case) genKey() string {
	switch {
	case c.Masquerade:
		return "masquerade"
	case c.FromPods && c.IPv6:
		return "pods6"
	case c.FromPods:
		return "pods"
	case c.IPv6:
		return "client6"
	}
	return "client"
}

func (c Case) String() string {
	if c.Masquerade {
		return "masquerade"
	}
	if c.FromPods && c.IPv6 {
		return "from pods, IPv6"
	}
	if c.FromPods {
		return "from pods"
	}
	if c.IPv6 {
		return harness.Plural(c.Services, "service") + ", IPv6"
	}
	return harness.Plural(c.Services, "service")
}

// Config configures Run.
type Config struct {
	harness.Run            // modes default to linux, linuxfp, linuxfp-tc
	Workloads   []Workload // default: all
	// Services: the service counts measured (default 1, 100, 1000), in increasing order.
	Services []int
	// NoMasquerade skips the masquerade case; NoFromPods the pods-as-clients case.
	NoMasquerade bool
	NoFromPods   bool
	Pods         int // pods holding the endpoints (default 6)
	// PodGRO: GRO on in the pods' eth0 (testbed.ServicesOptions.PodGRO).
	PodGRO bool
	// ProxyMode: kube-proxy's iptables mode (default) or nftables mode.
	ProxyMode  testbed.ProxyMode
	CRRWorkers int // concurrent connection-per-request clients (default 8)
	RRSessions int // long-lived request/response connections (default 8)
	Streams    int // bulk connections (default 4)
	GenCores   int // generator CPUs of the udp workload (default 1)
	FrameSize  int // udp frames, FCS included (default 64)
	// Prefix starts the names of the namespaces the benchmark creates (default "lfp-svc").
	Prefix string
	// Families: IPv4 (the default) and with IPv6 a dual-stack node and the IPv6 cases
	// (kube-proxy's IPv6 rules in ProxyMode).
	Families []harness.Family
}

// ipv4, ipv6: the families measured (none given: IPv4).
func (c *Config) ipv4() bool {
	return len(c.Families) == 0 || slices.Contains(c.Families, harness.IPv4)
}
func (c *Config) ipv6() bool { return slices.Contains(c.Families, harness.IPv6) }

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = "lfp-svc"
	}
	var err0 error
	if c.ProxyMode, err0 = testbed.ParseProxyMode(string(c.ProxyMode)); err0 != nil {
		return fmt.Errorf("--proxy-mode: %w", err0)
	}
	err := c.Run.Defaults(harness.RunDefaults{Name: "services", Modes: Modes,
		Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, Where: "the node"})
	if err != nil {
		return err
	}
	c.Workloads = harness.Choose(Workloads, c.Workloads)
	if len(c.Families) == 0 {
		c.Families = []harness.Family{harness.IPv4}
	}
	// No service count at all (not nil) leaves only the masquerade case.
	if c.Services == nil {
		c.Services = []int{1, 100, 1000}
	}
	if err := harness.Counts(&c.Services, nil, 1, testbed.MaxServices, "services"); err != nil {
		return err
	}
	if len(c.cases()) == 0 {
		return errors.New("nothing to measure: no service count, and no masquerade case (IPv4's only)")
	}
	if c.Pods == 0 {
		c.Pods = 6
	}
	if c.Pods < testbed.EndpointsPerService || c.Pods > 250 {
		return fmt.Errorf("--pods %d: want %d to 250", c.Pods, testbed.EndpointsPerService)
	}
	for _, v := range []struct {
		p    *int
		def  int
		name string
	}{{&c.CRRWorkers, 8, "crr-workers"}, {&c.RRSessions, 8, "rr-sessions"}, {&c.Streams, 4, "streams"}, {&c.GenCores, 1, "gen-cores"}} {
		if *v.p == 0 {
			*v.p = v.def
		}
		if *v.p < 1 || *v.p > 1000 {
			return fmt.Errorf("--%s %d: want 1 to 1000", v.name, *v.p)
		}
	}
	cpus, err := harness.UsableCPUs()
	if err != nil {
		return err
	}
	if c.GenCores > len(cpus) {
		return fmt.Errorf("--gen-cores %d: this process may use %d CPUs", c.GenCores, len(cpus))
	}
	if c.FrameSize == 0 {
		c.FrameSize = 64
	}
	if c.FrameSize < 64 || c.FrameSize > 1454 {
		return fmt.Errorf("--frame-size %d: want 64 to 1454 bytes (the pods' MTU is %d)", c.FrameSize, testbed.PodsMTU)
	}
	return nil
}

// cases lists the cases in the order they are measured.
func (c *Config) cases() []Case {
	var out []Case
	for _, n := range c.Services {
		if c.ipv4() {
			out = append(out, Case{Services: n})
		}
		if c.ipv6() {
			out = append(out, Case{Services: n, IPv6: true})
		}
	}
	last := 0
	if len(c.Services) > 0 {
		last = c.Services[len(c.Services)-1]
	}
	if !c.NoFromPods && last > 0 {
		if c.ipv4() {
			out = append(out, Case{Services: last, FromPods: true})
		}
		if c.ipv6() {
			out = append(out, Case{Services: last, FromPods: true, IPv6: true})
		}
	}
	if !c.NoMasquerade && c.ipv4() { // the outside host is IPv4's only
		out = append(out, Case{Services: last, Masquerade: true})
	}
	return out
}

// outsidePort is where the outside host's server listens in the masquerade case.
const outsidePort = 8080

// Run runs the services benchmark. It returns what it measured even when ctx is
// cancelled half-way (with ctx's error); every namespace it created is gone when it returns.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	res = newResult(cfg)
	defer func() { res.finish(time.Since(start)) }()
	cfg.Log.Info("building the node, its pods, the client and the outside host", "pods", cfg.Pods)
	topo, err := testbed.NewServices(cfg.Prefix, testbed.ServicesOptions{Pods: cfg.Pods, PodGRO: cfg.PodGRO, ProxyMode: cfg.ProxyMode, IPv6: cfg.ipv6()})
	if err != nil {
		return res, fmt.Errorf("build the services topology: %w", err)
	}
	defer func() {
		if cerr := topo.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the services topology: %w", cerr))
		}
	}()
	r := &svcRun{ctx: ctx, cfg: cfg, topo: topo, res: res}
	defer r.close()
	if err := r.setup(); err != nil {
		return res, err
	}
	for _, c := range cfg.cases() {
		if !c.podClients() || c.Services != r.loaded {
			t := time.Now()
			if err := topo.SetServices(c.Services); err != nil {
				return res, err
			}
			r.loaded = c.Services
			cfg.Log.Info("loaded kube-proxy's rules", "mode", cfg.ProxyMode, "services", c.Services, "took", time.Since(t).Round(time.Millisecond))
		}
		err := harness.EachRound(cfg.Rounds, cfg.Modes, func(round int, m harness.Mode) error {
			return r.withMode(m, func() error { return r.measureAll(c, round, m) })
		})
		if err != nil {
			return res, err
		}
	}
	return res, ctx.Err()
}

// svcRun is one run of the services benchmark: its node, the servers at the endpoints and
// outside, the udp workload's generators and sinks, and linuxfp in the node.
type svcRun struct {
	ctx  context.Context
	cfg  Config
	topo *testbed.Services
	res  *Result

	loaded  int                           // services whose rules are loaded
	servers []*svcServer                  // the pods', in topo.Pods order
	outside *svcServer                    // the outside host's
	gens    map[string]*harness.Generator // by Case.genKey
	podMAC  net.HardwareAddr              // pod 0's eth0 (the masquerade case's generator)
	podIdx  int
	sinks   map[string]*harness.Sink // udp: by endpoint pod address, or "outside"
	ct      *netlink.Handle          // netlink in the node (conntrack)
	lfp     *testbed.Linuxfp
	mode    harness.Mode
}

// setup resolves the neighbours and starts the servers: in every pod, one per TCP endpoint of the
// most services measured (of both families' services on a dual-stack node); in the outside host,
// one on outsidePort.
func (r *svcRun) setup() error {
	if err := r.topo.ResolveNeighbours(); err != nil {
		return fmt.Errorf("resolve neighbours: %w", err)
	}
	// The TCP clients (the client host; the pods in the masquerade case) reuse their TIME_WAIT
	// ports for new connections, as load generators are set up (see runCRR).
	for _, ns := range append([]*nsutil.NS{r.topo.Client}, podNamespaces(r.topo)...) {
		if _, err := ns.Run("sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"); err != nil {
			return err
		}
	}
	var err error
	if r.ct, err = netlink.NewHandleAt(r.topo.Node.Handle()); err != nil {
		return fmt.Errorf("netlink in the node: %w", err)
	}
	most := 0
	if len(r.cfg.Services) > 0 {
		most = r.cfg.Services[len(r.cfg.Services)-1]
	}
	svcs, err := testbed.ServicesFor(most, r.topo.PodIPs())
	if err != nil {
		return err
	}
	if r.topo.IPv6 {
		svcs6, err := testbed.ServicesFor6(most, r.topo.PodIPs())
		if err != nil {
			return err
		}
		svcs = append(svcs, svcs6...)
	}
	eps := map[netip.Addr][]netip.AddrPort{}
	for _, s := range svcs {
		if s.Proto == "tcp" {
			for _, ep := range s.Endpoints {
				eps[ep.Addr()] = append(eps[ep.Addr()], ep)
			}
		}
	}
	for _, pod := range r.topo.Pods {
		s, err := listenSvc(pod.NS, append(eps[pod.IP], eps[testbed.PodIP6(pod.IP)]...))
		if err != nil {
			return err
		}
		r.servers = append(r.servers, s)
	}
	if r.outside, err = listenSvc(r.topo.Outside, []netip.AddrPort{netip.AddrPortFrom(testbed.ServicesOutsideIP, outsidePort)}); err != nil {
		return err
	}
	if r.podMAC, r.podIdx, err = testbed.LinkOf(r.topo.Pods[0].NS, "eth0"); err != nil {
		return err
	}
	r.gens = map[string]*harness.Generator{}
	return nil
}

func podNamespaces(topo *testbed.Services) []*nsutil.NS {
	var out []*nsutil.NS
	for _, p := range topo.Pods {
		out = append(out, p.NS)
	}
	return out
}

func (r *svcRun) close() {
	for _, g := range r.gens {
		g.Close()
	}
	for _, s := range append(slices.Clone(r.servers), r.outside) {
		if s != nil {
			s.Close()
		}
	}
	if r.ct != nil {
		r.ct.Close()
	}
}

// nodeInterfaces are the node's interfaces linuxfp must have decided about before a measurement.
func (r *svcRun) nodeInterfaces() []string {
	want := []string{"in0", "out0"}
	for _, p := range r.topo.Pods {
		want = append(want, p.HostVeth)
	}
	return want
}

// withMode runs fn with the node in mode m: nothing attached (linux) or `linuxfp run` (with the
// mode's arguments), stopped afterwards whatever happens. Modes never overlap: before any, no
// linuxfp may answer in the node and nothing may be attached to in0 or out0.
func (r *svcRun) withMode(m harness.Mode, fn func() error) (err error) {
	if _, err := testbed.StatusClientIn(r.topo.Node).Status(); !errors.Is(err, status.ErrNotRunning) {
		return fmt.Errorf("enter %s: linuxfp still answers in the node (%v)", m, err)
	}
	if err := harness.Detached(r.topo.Node, "the node", "in0", "out0"); err != nil {
		return fmt.Errorf("enter %s: %w", m, err)
	}
	r.mode = m
	defer func() { r.mode = "" }()
	if m.RunsLinuxfp() {
		l, err := harness.StartLinuxfp(r.topo.Node, r.cfg.Binary, r.nodeInterfaces(), 10*time.Second, m.RunArgs()...)
		if err != nil {
			return fmt.Errorf("start linuxfp in the node: %w", err)
		}
		r.lfp = l
		defer func() {
			if serr := l.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("stop linuxfp: %w; log:\n%s", serr, l.Log.String()))
			}
			r.lfp = nil
		}()
	}
	return fn()
}

// settle waits until linuxfp (if it runs) has applied no change for linuxfpSettle.
func (r *svcRun) settle() error {
	if r.lfp == nil {
		return nil
	}
	return harness.Settle(r.lfp, 10*time.Second)
}

// measureAll measures every workload of case c once in mode m.
func (r *svcRun) measureAll(c Case, round int, m harness.Mode) error {
	for _, w := range r.cfg.Workloads {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		rd, err := r.measure(c, w)
		if err != nil {
			return fmt.Errorf("%s, %s, %s: %w", m, c, w, err)
		}
		r.res.add(c, w, m, rd)
		if rd.Error != "" {
			r.cfg.Log.Warn("round failed", "round", round+1, "mode", m, "case", c.String(), "workload", w, "err", rd.Error)
			continue
		}
		args := []any{"round", round + 1, "mode", m, "case", c.String(), "workload", w, w.unit(), fmt.Sprintf("%.4g", rd.Value)}
		if rd.AvgUs > 0 {
			args = append(args, "avg_us", fmt.Sprintf("%.1f", rd.AvgUs), "p99_us", fmt.Sprintf("%.1f", rd.P99Us))
		}
		if rd.Errors > 0 {
			args = append(args, "failed_connections", rd.Errors)
		}
		if rd.FastPath != nil {
			args = append(args, "linuxfp", rd.FastPath.Summary())
		}
		r.cfg.Log.Info("measured", args...)
	}
	return nil
}

// measure runs workload w of case c once in the current mode, with the node's conntrack table
// emptied first (every measurement starts from the same table; the connection-per-request
// workload leaves thousands of entries in TIME_WAIT), and in the linuxfp modes reads what
// linuxfp's programs did meanwhile (warm-up included). A workload that failed is a result (its
// Error), not a reason to stop.
func (r *svcRun) measure(c Case, w Workload) (rd Round, err error) {
	if w == UDP {
		restore, err := r.prepareUDP(c)
		if err != nil {
			return rd, err
		}
		defer func() {
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}()
	}
	if err := r.ct.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return rd, fmt.Errorf("flush the node's conntrack table: %w", err)
	}
	// That flush is IPv4's only (the kernel filters a flush by the request's family, and the
	// library asks for AF_INET): IPv6 entries are deleted one by one.
	if r.cfg.ipv6() {
		if _, err := r.ct.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.FAMILY_V6, everyFlow{}); err != nil {
			return rd, fmt.Errorf("flush the node's IPv6 conntrack entries: %w", err)
		}
	}
	var before *harness.NodeSnapshot
	var pid int
	var cpu0 time.Duration
	t0 := time.Now()
	if r.lfp != nil {
		if before, err = harness.ReadNodeStatus(r.topo.Node, r.cfg.Binary); err != nil {
			return rd, err
		}
		st, err := r.lfp.Client.Status()
		if err != nil {
			return rd, fmt.Errorf("linuxfp status: %w", err)
		}
		pid = st.PID
		if cpu0, err = harness.ProcessCPU(pid); err != nil {
			return rd, err
		}
	}
	b0 := r.backends(c, w)
	switch w {
	case UDP:
		err = r.udp(c, &rd)
	default:
		err = r.tcp(c, w, &rd)
	}
	if err != nil {
		if cerr := r.ctx.Err(); cerr != nil {
			return rd, cerr
		}
		rd.Error = err.Error()
	}
	rd.Backends = map[string]uint64{}
	for k, v := range r.backends(c, w) {
		if d := harness.CounterDelta(b0[k], v); d > 0 {
			rd.Backends[k] = d
		}
	}
	if r.lfp != nil {
		cpu1, err := harness.ProcessCPU(pid)
		if err != nil {
			return rd, err
		}
		rd.ControllerCPU = (cpu1 - cpu0).Seconds() / time.Since(t0).Seconds()
		after, err := harness.ReadNodeStatus(r.topo.Node, r.cfg.Binary)
		if err != nil {
			return rd, err
		}
		after.Node = "node"
		rd.FastPath = before.Delta(after)
		st, err := r.lfp.Client.Status()
		if err != nil {
			return rd, fmt.Errorf("linuxfp status: %w", err)
		}
		rd.Hooks = r.hooks(st)
	}
	return rd, nil
}

// everyFlow matches every conntrack entry.
type everyFlow struct{}

func (everyFlow) MatchConntrackFlow(*netlink.ConntrackFlow) bool { return true }

// hooks is where linuxfp's programs ran, by interface role ("xdp", "tc", ...; "none").
func (r *svcRun) hooks(st *status.Status) map[string]string {
	out := map[string]string{}
	for _, name := range r.nodeInterfaces() {
		role := name
		if strings.HasPrefix(name, "veth") {
			role = "pod veths"
		}
		h := harness.HookOf(st, name)
		if h == "" {
			h = "none"
		}
		if prev, ok := out[role]; ok && prev != h && !strings.Contains(prev, h) {
			h = prev + "," + h
		}
		out[role] = h
	}
	return out
}

// backends is what every endpoint (or the outside host) has received so far: TCP connections,
// or for udp the frames its sink counted.
func (r *svcRun) backends(c Case, w Workload) map[string]uint64 {
	out := map[string]uint64{}
	if w == UDP {
		for k, s := range r.sinks {
			if n, err := s.Read(); err == nil {
				out[k] = n.Packets
			}
		}
		return out
	}
	if c.Masquerade {
		out["outside"] = r.outside.accepted.Load()
		return out
	}
	for i, s := range r.servers {
		out[podAddr(c, r.topo.Pods[i]).String()] = s.accepted.Load()
	}
	return out
}

// podAddr is pod's address in case c's family.
func podAddr(c Case, pod *testbed.Pod) netip.Addr {
	if c.IPv6 {
		return testbed.PodIP6(pod.IP)
	}
	return pod.IP
}

// serviceIP is service i's cluster IP in case c's family.
func serviceIP(c Case, i int) netip.Addr {
	if c.IPv6 {
		return testbed.ServiceIP6(i)
	}
	return testbed.ServiceIP(i)
}

// tcp runs one TCP workload: from the client to the services' cluster IPs, or from the pods to
// the outside host.
func (r *svcRun) tcp(c Case, w Workload, rd *Round) error {
	clients := []*nsutil.NS{r.topo.Client}
	if c.FromPods {
		clients = podNamespaces(r.topo)
	}
	var targets []netip.AddrPort
	if c.Masquerade {
		clients = podNamespaces(r.topo)
		targets = []netip.AddrPort{netip.AddrPortFrom(testbed.ServicesOutsideIP, outsidePort)}
	} else {
		for i := range c.Services {
			targets = append(targets, netip.AddrPortFrom(serviceIP(c, i), testbed.ServiceTCPPort))
		}
	}
	// Connection k: from client k, to target k (modulo their numbers): distinct services and
	// pods as far as there are.
	dials := func(n int) []harness.RRDial {
		out := make([]harness.RRDial, n)
		for k := range out {
			out[k] = harness.RRDial{From: clients[k%len(clients)], To: targets[k%len(targets)]}
		}
		return out
	}
	switch w {
	case CRR:
		tr, err := runCRR(r.ctx, clients, targets, r.cfg.CRRWorkers, r.cfg.Warmup, r.cfg.Duration)
		rd.set(tr)
		return err
	case RR:
		lr, err := harness.RunRRSessions(r.ctx, dials(r.cfg.RRSessions), r.cfg.Warmup, r.cfg.Duration)
		if err != nil {
			return err
		}
		rd.set(svcTraffic{Count: uint64(lr.Transactions), Seconds: lr.Seconds, AvgUs: lr.AvgUs, P99Us: lr.P99Us})
		return nil
	default:
		uploaded := func() uint64 {
			if c.Masquerade {
				return r.outside.uploaded.Load()
			}
			var n uint64
			for _, s := range r.servers {
				n += s.uploaded.Load()
			}
			return n
		}
		tr, err := runStreams(r.ctx, dials(r.cfg.Streams), w == Upload, w == DownloadHalfClosed, uploaded, r.cfg.Warmup, r.cfg.Duration)
		if err != nil {
			return err
		}
		rd.set(tr)
		rd.Value = float64(tr.Count) * 8 / tr.Seconds / 1e9
		return nil
	}
}

// set records a TCP workload's numbers; Value is the count per second.
func (rd *Round) set(tr svcTraffic) {
	rd.Count, rd.Seconds, rd.AvgUs, rd.P99Us, rd.Errors, rd.FirstError = tr.Count, tr.Seconds, tr.AvgUs, tr.P99Us, tr.Errors, tr.Err
	if tr.Seconds > 0 {
		rd.Value = float64(tr.Count) / tr.Seconds
	}
}

// Result is everything the services benchmark measured. The JSON form is for scripts.
// Its targets: issue 6's target for every case whose udp workload ran in Linux and linuxfp.
type Result struct {
	harness.Results[Settings, Row, Target]
}

// Settings is the configuration the numbers were taken with.
type Settings struct {
	harness.Setup[Workload]
	Cases      []Case `json:"cases"`
	Pods       int    `json:"pods"`
	PodGRO     bool   `json:"pod_gro,omitempty"`
	ProxyMode  string `json:"proxy_mode"`
	Endpoints  int    `json:"endpoints_per_service"`
	CRRWorkers int    `json:"crr_workers"`
	RRSessions int    `json:"rr_sessions"`
	Streams    int    `json:"streams"`
	GenCores   int    `json:"generator_cores"`
	FrameSize  int    `json:"udp_frame_size"`
	harness.Timing
}
