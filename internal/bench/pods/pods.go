package pods

// The pods benchmark: the paper's Kubernetes experiment. Two nodes of a Flannel cluster (vxlan
// backend) with pods plugged in by the CNI bridge plugin, built by testbed.NewPods with the
// commands Flannel and the plugins issue. TCP request/response (1 byte each way, netperf's
// TCP_RR) between pod pairs, each pair one connection, all pairs at once:
//   - intra: client pod k on node1 -> server pod k on node1 (pod veth -> cni0 -> pod veth);
//   - inter: client pod k on node1 -> server pod k on node2 (pod veth -> cni0 -> routed into
//     flannel.1 -> encapsulated -> eth0 -> node2's eth0 -> decapsulated by flannel.1 -> routed
//     into cni0 -> pod veth), and back.
// node1 has 2 x the most pairs pods (clients, then intra-node servers), node2 the most pairs
// (inter-node servers). Modes: Linux alone, and `linuxfp run` in both node namespaces (pods'
// namespaces are the containers': nothing runs there), and the ceiling (the client pods joined
// to their servers directly, see Modes), alternating round by round.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/status"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// Workload is where the pod pairs are.
type Workload string

const (
	// WorkloadIntra: client and server pods on the same node, switched by its cni0.
	WorkloadIntra Workload = "intra"
	// WorkloadInter: client pods on node1, servers on node2, through Flannel's VXLAN overlay.
	WorkloadInter Workload = "inter"
)

// Workloads lists the workloads in report order.
var Workloads = []Workload{WorkloadIntra, WorkloadInter}

// ParseWorkload checks a workload's name.
func ParseWorkload(s string) (Workload, error) { return harness.ParseName(Workloads, "workload", s) }

// Modes are the modes the pods benchmark runs. Its ceiling forwards nothing at all: each
// client pod is joined to its server by one veth pair (testbed.DirectPods), so it measures what
// the pods' own stacks and the client cost, which no data path between them can save. The tc
// ceiling (ceiling-tc, intra-node only, asked for by name) is a data path: the least one at tc
// in this topology (ceilingtc.go).
var Modes = []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp, harness.ModeCeiling, harness.ModeCeilingTC}

// DefaultModes are the modes run unless told otherwise.
var DefaultModes = []harness.Mode{harness.ModeLinux, harness.ModeLinuxfp, harness.ModeCeiling}

// Config configures Run.
type Config struct {
	// Run: modes default to linux, linuxfp and ceiling; Duration is the measured time per
	// round, mode, workload and pair count; Warmup transactions are not counted.
	harness.Run
	Workloads []Workload // default: intra and inter
	// Pairs: the numbers of concurrent pod pairs measured (default 1, 2, 5, 10).
	Pairs []int
	// Prefix starts the names of the namespaces the benchmark creates (default "lfp-pods").
	Prefix string
}

// maxPodPairs bounds --pairs: node1 holds two pods per pair, all in one /24.
const maxPodPairs = 100

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = "lfp-pods"
	}
	err := c.Run.Defaults(harness.RunDefaults{Name: "pods", Modes: Modes, Default: DefaultModes,
		Duration: 2 * time.Second, Warmup: 500 * time.Millisecond, Where: "the nodes"})
	if err != nil {
		return err
	}
	c.Workloads = harness.Choose(Workloads, c.Workloads)
	if slices.Contains(c.Modes, harness.ModeCeilingTC) && slices.Contains(c.Workloads, WorkloadInter) {
		return errors.New("mode ceiling-tc forwards between pods of one node only (across nodes it would have to encapsulate): run it with --workloads intra")
	}
	return harness.Counts(&c.Pairs, []int{1, 2, 5, 10}, 1, maxPodPairs, "pairs")
}

// podsLayout is how many pods each node gets for the configuration, and which pods pair up.
type podsLayout struct {
	pods [2]int // node1, node2
	max  int    // the most pairs measured
}

func newPodsLayout(cfg Config) podsLayout {
	l := podsLayout{max: slices.Max(cfg.Pairs)}
	l.pods[0] = l.max // clients
	if slices.Contains(cfg.Workloads, WorkloadIntra) {
		l.pods[0] += l.max // intra-node servers
	}
	if slices.Contains(cfg.Workloads, WorkloadInter) {
		l.pods[1] = l.max
	}
	return l
}

// pair returns pair k's client and server pods for workload w.
func (l podsLayout) pair(p *testbed.Pods, w Workload, k int) (client, server *testbed.Pod) {
	client = p.Nodes[0].Pods[k]
	if w == WorkloadIntra {
		return client, p.Nodes[0].Pods[l.max+k]
	}
	return client, p.Nodes[1].Pods[k]
}

// Run runs the pods benchmark. It returns what it measured even when ctx is cancelled
// half-way (with ctx's error); every namespace it created is gone when it returns.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	res = newResult(cfg)
	defer func() { res.finish(time.Since(start)) }()
	layout := newPodsLayout(cfg)
	res.Config.Pods = layout.pods
	cfg.Log.Info("building the nodes and pods", "node1_pods", layout.pods[0], "node2_pods", layout.pods[1])
	p, err := testbed.NewPods(cfg.Prefix, testbed.PodsOptions{Pods: layout.pods})
	if err != nil {
		return res, fmt.Errorf("build the pods topology: %w", err)
	}
	defer func() {
		if cerr := p.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the pods topology: %w", cerr))
		}
	}()
	r := &podsRun{ctx: ctx, cfg: cfg, pods: p, layout: layout, res: res}
	if slices.Contains(cfg.Modes, harness.ModeCeiling) {
		if r.direct, err = testbed.NewDirectPods(cfg.Prefix, layout.max); err != nil {
			return res, fmt.Errorf("build the ceiling's pod pairs: %w", err)
		}
		defer func() {
			if cerr := r.direct.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the ceiling's pod pairs: %w", cerr))
			}
		}()
	}
	defer r.stopServers()
	if err := r.startServers(); err != nil {
		return res, err
	}
	err = harness.EachRound(cfg.Rounds, cfg.Modes, func(round int, m harness.Mode) error {
		return r.withMode(m, func() error { return r.measureAll(round, m) })
	})
	if err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// podsRun is one run of the pods benchmark: its nodes and pods, their servers, and linuxfp in
// each node in linuxfp mode.
type podsRun struct {
	ctx     context.Context
	cfg     Config
	pods    *testbed.Pods
	layout  podsLayout
	res     *Result
	direct  *testbed.DirectPods // the ceiling's pairs (nil without ceiling mode)
	servers []*harness.RRServer
	lfps    []*testbed.Linuxfp // linuxfp mode: one per node
}

// startServers starts a request/response server in every server pod, on its address.
func (r *podsRun) startServers() error {
	var srvs []*testbed.Pod
	for _, w := range r.cfg.Workloads {
		for k := range r.layout.max {
			_, srv := r.layout.pair(r.pods, w, k)
			srvs = append(srvs, srv)
		}
	}
	if r.direct != nil {
		for _, pair := range r.direct.Pairs {
			srvs = append(srvs, pair[1])
		}
	}
	for _, srv := range srvs {
		s, err := harness.ListenRR(srv.NS, netip.AddrPortFrom(srv.IP, harness.RRPort))
		if err != nil {
			return err
		}
		r.servers = append(r.servers, s)
	}
	return nil
}

func (r *podsRun) stopServers() {
	for _, s := range r.servers {
		s.Close()
	}
}

// withMode runs fn with the nodes in mode m: nothing attached (linux, ceiling), `linuxfp run`
// in both nodes (linuxfp), or the tc ceiling in node1 (ceiling-tc), detached or stopped
// afterwards whatever happens. Modes never overlap: before any, no linuxfp may answer in either
// node.
func (r *podsRun) withMode(m harness.Mode, fn func() error) (err error) {
	for _, n := range r.pods.Nodes {
		if _, err := testbed.StatusClientIn(n.NS).Status(); !errors.Is(err, status.ErrNotRunning) {
			return fmt.Errorf("enter %s: linuxfp still answers in node%d (%v)", m, n.Index, err)
		}
	}
	if m == harness.ModeCeilingTC {
		c, err := attachCeilingTC(r.pods, r.layout)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := c.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("detach the tc ceiling: %w", cerr))
			}
		}()
	}
	if m == harness.ModeLinuxfp {
		defer func() {
			for i, l := range r.lfps {
				if serr := l.Stop(); serr != nil {
					err = errors.Join(err, fmt.Errorf("stop linuxfp in node%d: %w; log:\n%s", i+1, serr, l.Log.String()))
				}
			}
			r.lfps = nil
		}()
		for _, n := range r.pods.Nodes {
			l, err := startLinuxfpNode(n, r.cfg.Binary)
			if err != nil {
				return fmt.Errorf("start linuxfp in node%d: %w", n.Index, err)
			}
			r.lfps = append(r.lfps, l)
		}
	}
	return fn()
}

// startLinuxfpNode starts linuxfp in a node and waits until it has decided about the node's
// pod veths, flannel.1 and eth0 and settled.
func startLinuxfpNode(n *testbed.PodNode, bin string) (*testbed.Linuxfp, error) {
	want := []string{"eth0", "flannel.1"}
	for _, pod := range n.Pods {
		want = append(want, pod.HostVeth)
	}
	return harness.StartLinuxfp(n.NS, bin, want, 5*time.Second)
}

// measureAll measures every workload and pair count once in mode m.
func (r *podsRun) measureAll(round int, m harness.Mode) error {
	for _, w := range r.cfg.Workloads {
		for _, n := range r.cfg.Pairs {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			rd, err := r.measure(m, w, n)
			if err != nil {
				return fmt.Errorf("%s, %s, %d pairs: %w", m, w, n, err)
			}
			r.res.add(w, n, m, rd)
			if rd.Error != "" {
				r.cfg.Log.Warn("round failed", "round", round+1, "mode", m, "workload", w, "pairs", n, "err", rd.Error)
				continue
			}
			args := []any{"round", round + 1, "mode", m, "workload", w, "pairs", n,
				"tps", fmt.Sprintf("%.0f", rd.TPS), "avg_us", fmt.Sprintf("%.1f", rd.AvgUs), "p99_us", fmt.Sprintf("%.1f", rd.P99Us)}
			for _, fp := range rd.Nodes {
				args = append(args, fp.Node, fp.Summary())
			}
			r.cfg.Log.Info("measured", args...)
		}
	}
	return nil
}

// measure runs n pairs of workload w at once in mode m and, in linuxfp mode, reads what
// linuxfp's programs did in each node meanwhile. The ceiling's pairs are the direct ones, the
// same for both workloads. A round in which TCP failed is a result (its Error), not a reason to
// stop.
func (r *podsRun) measure(m harness.Mode, w Workload, n int) (Round, error) {
	dials := make([]harness.RRDial, n)
	for k := range dials {
		c, s := r.layout.pair(r.pods, w, k)
		if m == harness.ModeCeiling {
			c, s = r.direct.Pairs[k][0], r.direct.Pairs[k][1]
		}
		dials[k] = harness.RRDial{From: c.NS, To: netip.AddrPortFrom(s.IP, harness.RRPort)}
	}
	before, err := r.snapshots()
	if err != nil {
		return Round{}, err
	}
	lr, err := harness.RunRRSessions(r.ctx, dials, r.cfg.Warmup, r.cfg.Duration)
	if err != nil {
		if cerr := r.ctx.Err(); cerr != nil {
			return Round{}, cerr
		}
		lr = harness.LatencyRound{Error: err.Error()}
	}
	rd := Round{LatencyRound: lr}
	after, err := r.snapshots()
	if err != nil {
		return Round{}, err
	}
	for i := range before {
		rd.Nodes = append(rd.Nodes, before[i].Delta(after[i]))
	}
	return rd, nil
}

// snapshots reads `linuxfp status -j` in every node (none outside linuxfp mode).
func (r *podsRun) snapshots() ([]*harness.NodeSnapshot, error) {
	if r.lfps == nil {
		return nil, nil
	}
	var out []*harness.NodeSnapshot
	for _, n := range r.pods.Nodes {
		s, err := harness.ReadNodeStatus(n.NS, r.cfg.Binary)
		if err != nil {
			return nil, fmt.Errorf("node%d: %w", n.Index, err)
		}
		s.Node = fmt.Sprintf("node%d", n.Index)
		out = append(out, s)
	}
	return out, nil
}

// podsRoles is the report order of the roles.
var podsRoles = []string{"pod veths", "cni0", "flannel.1", "eth0"}

// Result is everything the pods benchmark measured. The JSON form is for scripts.
type Result struct {
	harness.Results[Settings, Row, Target]
}

// Settings is the configuration the numbers were taken with.
type Settings struct {
	harness.Setup[Workload]
	Pairs []int `json:"pairs"`
	harness.Timing
	// Pods: how many pods node1 and node2 had.
	Pods [2]int `json:"pods"`
}
