package controller

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/linuxfp/linuxfp/internal/dataplane"
	"github.com/linuxfp/linuxfp/internal/status"
)

// MetricsConfig: where `linuxfp run --metrics-addr` serves Prometheus metrics, /healthz and
// /readyz (Addr empty: nowhere), and the build linuxfp_build_info names.
type MetricsConfig struct {
	Addr    string
	Version string
	Commit  string
}

// The metrics address answers anyone who can reach it, without checking who asks: what it tells
// (counters, the rules' text) is read-only and is what `linuxfp status` shows root. It is off
// unless asked for and meant for localhost or a node-local scraper; a flood of connections is
// bounded as the status API's is (see apiguard.go), so that it cannot take the file
// descriptors the controller needs.
const (
	// metricsMaxConns: connections open at once; one beyond it is closed at accept.
	metricsMaxConns = 16
	// metricsMaxScrapes: scrapes reading the data plane's counters at once; promhttp answers
	// one more 503.
	metricsMaxScrapes = 4
	// stallAfter: how long /healthz lets one apply run, seen busy with no apply recorded,
	// before it says the controller loop is stuck. Compiling a 50,000-rule ruleset and
	// verifying a burst of programs take seconds, not minutes.
	stallAfter = 2 * time.Minute
)

// promState is what the controller records for Prometheus as things happen (the rest is read
// from the data plane at scrape time).
type promState struct {
	latency     prometheus.Histogram
	applyErrors prometheus.Counter

	// The last time /healthz saw the controller idle or an apply recorded since its last look.
	mu           sync.Mutex
	progressAt   time.Time
	progressSeq  uint64
	progressBusy bool
}

// observeChange records one change of the data plane (react calls it for each).
func (c *Controller) observeChange(ch status.Change) {
	if c.metrics == nil {
		return
	}
	c.metrics.latency.Observe(ch.Applied.Sub(ch.FirstEvent).Seconds())
	if ch.Err != "" {
		c.metrics.applyErrors.Inc()
	}
}

// serveMetrics serves metrics, /healthz and /readyz on cfg.Metrics.Addr, if set, until the
// returned function is called.
func (c *Controller) serveMetrics() (stop func(), err error) {
	mc := c.cfg.Metrics
	if mc.Addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", mc.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w (see --metrics-addr)", mc.Addr, err)
	}
	c.metrics = &promState{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "linuxfp_apply_latency_seconds",
			Help: "Time from the first event of a change of Linux's configuration to the data plane following it.",
			// Events are coalesced for 2 to 20 ms; an apply that verifies programs or compiles a
			// large ruleset takes up to seconds.
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		applyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "linuxfp_apply_errors_total",
			Help: "Applies that did not bring the data plane to Linux's configuration (what they could not apply went to Linux).",
		}),
		progressAt: time.Now(),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.metrics.latency, c.metrics.applyErrors, newCollector(c, mc),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            errorLogger{c},
		MaxRequestsInFlight: metricsMaxScrapes,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := c.healthy(time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := c.ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := newAPIServer(mux, c.log)
	go srv.Serve(&limitListener{Listener: ln, slots: make(chan struct{}, metricsMaxConns)})
	c.log.Info("serving metrics", "addr", ln.Addr().String())
	return func() { srv.Close() }, nil
}

type errorLogger struct{ c *Controller }

func (l errorLogger) Println(v ...any) { l.c.log.Warn("metrics", "err", fmt.Sprint(v...)) }

// ready: the first apply is done, as when Run tells systemd it is ready: the data plane is
// installed, or what it could not install is Linux's (status says why).
func (c *Controller) ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq == 0 {
		return errors.New("the first data plane is not installed yet")
	}
	return nil
}

// healthy: the watchers run, and the controller loop is waiting for events or making progress.
// An apply runs with busy set; one seen busy at every look for stallAfter with no apply
// recorded is taken as stuck. Looks are what /healthz is asked, so a stall is seen at the
// second look after stallAfter, never earlier.
func (c *Controller) healthy(now time.Time) error {
	if len(c.w.Failed) > 0 {
		// The loop stops at a watcher's failure; one it has not taken means it is not reading.
		return errors.New("an event source failed and the controller loop has not stopped")
	}
	busy := c.busy.Load()
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	m := c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	if !busy || !m.progressBusy || seq != m.progressSeq {
		m.progressAt, m.progressSeq, m.progressBusy = now, seq, busy
		return nil
	}
	if d := now.Sub(m.progressAt); d > stallAfter {
		return fmt.Errorf("an apply has been running for more than %s", d.Round(time.Second))
	}
	return nil
}

// limitListener closes, at accept, a connection beyond the cap of open ones (rather than
// leaving it in the backlog, see apiMaxConns).
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

// collector reads, at each scrape, what `linuxfp status` reads: the per-CPU counters of every
// installed program and filter rule, the program cache, and the fence.
type collector struct {
	c                               *Controller
	packets, bytes                  *prometheus.Desc
	rulePackets, ruleBytes          *prometheus.Desc
	programs, verified, fenced, bld *prometheus.Desc
	version, commit                 string
}

func newCollector(c *Controller, mc MetricsConfig) *collector {
	ifLabels := []string{"interface", "outcome", "reason"}
	return &collector{c: c, version: mc.Version, commit: mc.Commit,
		packets: prometheus.NewDesc("linuxfp_packets_total",
			"Packets a fast-path program saw, by what it did (outcome) and why (reason: the names of linuxfp status). A to_tc packet is counted again by the tc program that takes it.",
			ifLabels, nil),
		bytes: prometheus.NewDesc("linuxfp_bytes_total",
			"Bytes of the packets of linuxfp_packets_total.", ifLabels, nil),
		rulePackets: prometheus.NewDesc("linuxfp_filter_rule_packets_total",
			"Packets the fast path decided at a netfilter rule or chain policy (iptables -v does not count them), by outcome: dropped, matched, or linux (handed to Linux).",
			[]string{"family", "rule", "outcome"}, nil),
		ruleBytes: prometheus.NewDesc("linuxfp_filter_rule_bytes_total",
			"Bytes of the packets of linuxfp_filter_rule_packets_total.", []string{"family", "rule", "outcome"}, nil),
		programs: prometheus.NewDesc("linuxfp_programs",
			"Verified programs held, one per kind of interface.", nil, nil),
		verified: prometheus.NewDesc("linuxfp_programs_verified_total",
			"Programs the kernel verified since start.", nil, nil),
		fenced: prometheus.NewDesc("linuxfp_fenced",
			"1 while a family's packets go to Linux because a change is not applied yet (fenced).",
			[]string{"family"}, nil),
		bld: prometheus.NewDesc("linuxfp_build_info",
			"The build running (always 1).", []string{"version", "commit", "goversion"}, nil),
	}
}

func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{k.packets, k.bytes, k.rulePackets, k.ruleBytes, k.programs, k.verified, k.fenced, k.bld} {
		ch <- d
	}
}

func (k *collector) Collect(ch chan<- prometheus.Metric) {
	st := k.c.status(false)
	for _, it := range st.Interfaces {
		for _, s := range interfaceSamples(it) {
			ch <- prometheus.MustNewConstMetric(k.packets, prometheus.CounterValue, float64(s.Counter.Packets), it.Name, s.outcome, s.reason)
			ch <- prometheus.MustNewConstMetric(k.bytes, prometheus.CounterValue, float64(s.Counter.Bytes), it.Name, s.outcome, s.reason)
		}
	}
	for _, r := range st.FilterRules {
		ch <- prometheus.MustNewConstMetric(k.rulePackets, prometheus.CounterValue, float64(r.Counter.Packets), r.Family, r.Rule, r.Outcome)
		ch <- prometheus.MustNewConstMetric(k.ruleBytes, prometheus.CounterValue, float64(r.Counter.Bytes), r.Family, r.Rule, r.Outcome)
	}
	ch <- prometheus.MustNewConstMetric(k.programs, prometheus.GaugeValue, float64(st.ProgramKinds))
	ch <- prometheus.MustNewConstMetric(k.verified, prometheus.CounterValue, float64(st.ProgramsVerified))
	for _, fam := range dataplane.BothFamilies.Names() {
		v := 0.0
		for _, f := range st.Fenced {
			if f == fam {
				v = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(k.fenced, prometheus.GaugeValue, v, fam)
	}
	ch <- prometheus.MustNewConstMetric(k.bld, prometheus.GaugeValue, 1, k.version, k.commit, runtime.Version())
}

// sample is one interface counter with its outcome and reason labels.
type sample struct {
	outcome, reason string
	status.Counter
}

// interfaceSamples maps what status shows of an interface to labelled counters. An interface
// with a program always has its fast-path outcomes (zero or not), so that their series exist
// from the start; the reasons for handing packets to Linux appear once counted (status lists
// only those), which keeps an idle interface at a dozen series instead of a hundred.
func interfaceSamples(it status.Interface) []sample {
	if it.Program == nil {
		return nil
	}
	out := []sample{
		{"forwarded", dataplane.Forwarded.String(), it.Forwarded},
		{"bridged", dataplane.Bridged.String(), it.Bridged},
		{"dropped", dataplane.FilterDropped.String(), it.Dropped},
		{"to_tc", dataplane.ToTC.String(), it.ToTC},
		{"encapsulated", dataplane.Encapsulated.String(), it.Encapsulated},
		{"decapsulated", dataplane.Decapsulated.String(), it.Decapsulated},
	}
	for r, cn := range it.Passed {
		out = append(out, sample{"to_linux", r, cn})
	}
	return out
}
