package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/linuxfp/linuxfp/internal/testbed"
)

// metricsAddr is where the tests serve metrics: the DUT's own loopback.
const metricsAddr = "127.0.0.1:9650"

// metricsClient talks HTTP to addresses inside the DUT.
func metricsClient(tb *testbed.Testbed) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := tb.DUT.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

func httpGet(t *testing.T, hc *http.Client, path string) (int, string) {
	t.Helper()
	resp, err := hc.Get("http://" + metricsAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape reads /metrics with the Prometheus text parser.
func scrape(t *testing.T, hc *http.Client) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, hc, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs
}

// metricValue is the value of the sample of family name whose labels include want (counter,
// gauge or untyped), and whether there is one.
func metricValue(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		labels := map[string]string{}
		for _, lp := range m.Label {
			labels[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// TestMetrics: --metrics-addr serves the counters status shows, in Prometheus's format, and
// /healthz and /readyz.
func TestMetrics(t *testing.T) {
	requireTool(t, "iptables")
	tb := newTestbed(t, testbed.Options{})
	l := startLinuxfp(t, tb, "--metrics-addr", metricsAddr)
	hc := metricsClient(tb)
	// startLinuxfp waited for programs on in0 and out0: the first data plane is installed.
	for _, path := range []string{"/readyz", "/healthz"} {
		if code, body := httpGet(t, hc, path); code != http.StatusOK {
			t.Fatalf("%s after start: %d %s", path, code, body)
		}
	}

	// Forwarded packets: the scrape right after status agrees with it (the traffic stopped
	// before, so no forwarded packet can arrive in between).
	waitVerdict(t, tb, l, "198.19.3.1", "forwarded", 10)
	sendUDP(t, tb, "198.19.3.1", 100)
	eventually(t, 5*time.Second, "status and /metrics agree on in0's forwarded packets", func() error {
		it, err := l.Interface("in0")
		if err != nil {
			return err
		}
		mfs := scrape(t, hc)
		in0 := map[string]string{"interface": "in0", "outcome": "forwarded", "reason": "forwarded"}
		pk, ok := metricValue(mfs, "linuxfp_packets_total", in0)
		by, _ := metricValue(mfs, "linuxfp_bytes_total", in0)
		if !ok || it.Forwarded.Packets < 110 || uint64(pk) != it.Forwarded.Packets || uint64(by) != it.Forwarded.Bytes {
			return fmt.Errorf("status forwarded %d packets, %d bytes; /metrics %v packets (found: %v), %v bytes",
				it.Forwarded.Packets, it.Forwarded.Bytes, pk, ok, by)
		}
		return nil
	})

	// A DROP rule's packets: outcome dropped on in0, and the rule's own counter.
	sh(t, tb.DUT, "iptables -A FORWARD -d 198.19.3.0/24 -j DROP")
	waitVerdict(t, tb, l, "198.19.3.1", "dropped", 0)
	it, err := l.Interface("in0")
	if err != nil {
		t.Fatal(err)
	}
	mfs := scrape(t, hc)
	dropped, _ := metricValue(mfs, "linuxfp_packets_total", map[string]string{"interface": "in0", "outcome": "dropped"})
	if dropped < 10 || uint64(dropped) != it.Dropped.Packets {
		t.Errorf("in0 dropped: /metrics %v, status %d; want the same, at least 10", dropped, it.Dropped.Packets)
	}
	ruleCounted := false
	for _, m := range mfs["linuxfp_filter_rule_packets_total"].GetMetric() {
		rule, fam := "", ""
		for _, lp := range m.Label {
			switch lp.GetName() {
			case "rule":
				rule = lp.GetValue()
			case "family":
				fam = lp.GetValue()
			}
		}
		ruleCounted = ruleCounted || (fam == "ipv4" && strings.Contains(rule, "ip filter FORWARD rule 1") && m.Counter.GetValue() >= 10)
	}
	if !ruleCounted {
		t.Errorf("no linuxfp_filter_rule_packets_total for the DROP rule: %v", mfs["linuxfp_filter_rule_packets_total"])
	}

	// The rest is there, with the values a running controller has.
	if v, ok := metricValue(mfs, "linuxfp_programs", nil); !ok || v < 1 {
		t.Errorf("linuxfp_programs %v (found: %v), want at least 1", v, ok)
	}
	if v, ok := metricValue(mfs, "linuxfp_programs_verified_total", nil); !ok || v < 1 {
		t.Errorf("linuxfp_programs_verified_total %v (found: %v), want at least 1", v, ok)
	}
	if _, ok := metricValue(mfs, "linuxfp_apply_errors_total", nil); !ok {
		t.Error("no linuxfp_apply_errors_total")
	}
	for _, fam := range []string{"ipv4", "ipv6"} {
		if _, ok := metricValue(mfs, "linuxfp_fenced", map[string]string{"family": fam}); !ok {
			t.Errorf("no linuxfp_fenced{family=%q}", fam)
		}
	}
	if v, ok := metricValue(mfs, "linuxfp_build_info", nil); !ok || v != 1 {
		t.Errorf("linuxfp_build_info %v (found: %v), want 1", v, ok)
	}
	// The first apply and the rule's are at least two changes observed.
	if h := mfs["linuxfp_apply_latency_seconds"].GetMetric(); len(h) != 1 || h[0].Histogram.GetSampleCount() < 2 {
		t.Errorf("linuxfp_apply_latency_seconds: %v, want at least 2 observations", h)
	}
	if code, body := httpGet(t, hc, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
}
