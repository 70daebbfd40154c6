package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/linuxfp/linuxfp/internal/nsutil"
	"github.com/linuxfp/linuxfp/internal/testbed"
)

// The latency test is netperf's TCP_RR, which is not packaged here: Sessions TCP connections from
// gen to a server in the sink, each sending one byte and waiting for one byte back, over and over.
// Client and server run in this process; their sockets are created inside the namespaces (a
// socket stays in the netns it was created in) and all their packets cross the DUT.

// LatencyMode is one mode's request/response result: the medians over rounds.
type LatencyMode struct {
	Mode     Mode    `json:"mode"`
	Sessions int     `json:"sessions"`
	TPS      float64 `json:"transactions_per_s"`
	AvgUs    float64 `json:"avg_us"`
	P99Us    float64 `json:"p99_us"`
	StddevUs float64 `json:"stddev_us"`
	ModeRounds[LatencyRound]
}

// LatencyRound is one round's transactions.
type LatencyRound struct {
	Transactions int       `json:"transactions"`
	Seconds      float64   `json:"seconds"`
	TPS          float64   `json:"transactions_per_s"`
	AvgUs        float64   `json:"avg_us"`
	P99Us        float64   `json:"p99_us"`
	StddevUs     float64   `json:"stddev_us"`
	FastPath     *FastPath `json:"linuxfp_in0,omitempty"`
	Error        string    `json:"error,omitempty"`
}

// Failure is why the round failed ("" if it did not).
func (r LatencyRound) Failure() string { return r.Error }

// RRPort is where the request/response server listens on the sink's address.
const RRPort = 12865 // netperf's control port, for recognisability in captures

// latency runs the request/response test in Linux and linuxfp mode (the ceiling forwards only
// one way), rotated round by round.
func (b *Pipeline) latency() error {
	var modes []Mode
	for _, m := range b.Cfg.Modes {
		if !m.Ceiling() {
			modes = append(modes, m)
		}
	}
	if b.Cfg.KeepTxCsum {
		restore, err := setTxCsum(b.TB, "on")
		if err != nil {
			return err
		}
		defer restore()
	}
	srv, err := startRRServer(b.TB)
	if err != nil {
		return err
	}
	defer srv.Close()
	per := map[Mode][]LatencyRound{}
	defer func() { b.Res.Latency = summariseLatency(per, modes, b.Cfg.Sessions) }()
	err = EachRound(b.Cfg.Rounds, modes, func(r int, m Mode) error {
		return b.WithMode(m, func() error {
			if _, err := b.prepare(); err != nil {
				return err
			}
			lfp0, err := b.DUT.lfpStatus()
			if err != nil {
				return err
			}
			lr, err := runRR(b.Ctx, b.TB, b.Cfg.Sessions, b.Cfg.Warmup, b.Cfg.Duration)
			if err != nil {
				if cerr := b.Ctx.Err(); cerr != nil {
					return cerr
				}
				// A mode that cannot carry TCP is a result, not a reason to stop the run.
				lr = LatencyRound{Error: err.Error()}
				b.Log.Warn("latency round failed", "round", r+1, "mode", m, "err", err)
			}
			lfp1, err := b.DUT.lfpStatus()
			if err != nil {
				return err
			}
			lr.FastPath = fastPathDelta(lfp0, lfp1)
			per[m] = append(per[m], lr)
			if lr.Error != "" {
				return nil
			}
			b.Log.Info("measured latency", "round", r+1, "mode", m, "tps", fmt.Sprintf("%.0f", lr.TPS),
				"avg_us", fmt.Sprintf("%.1f", lr.AvgUs), "p99_us", fmt.Sprintf("%.1f", lr.P99Us))
			return nil
		})
	})
	return err
}

// RRServer answers every byte with one byte.
type RRServer struct {
	ln net.Listener
	wg sync.WaitGroup
	mu sync.Mutex
	cs []net.Conn
}

func startRRServer(tb *testbed.Testbed) (*RRServer, error) {
	s, err := ListenRR(tb.Sink, netip.AddrPortFrom(tb.SinkIP, RRPort))
	if err != nil {
		return nil, fmt.Errorf("in the sink: %w", err)
	}
	return s, nil
}

// ListenRR starts a request/response server on addr in the namespace ns (its listening socket,
// and so every connection it accepts, belongs to ns).
func ListenRR(ns *nsutil.NS, addr netip.AddrPort) (*RRServer, error) {
	s := &RRServer{}
	err := ns.Do(func() error {
		var err error
		s.ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, ns.Name, err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.cs = append(s.cs, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				// Closed when the client closes (netserver does the same): a socket left
				// half-closed would keep sending keepalive probes into later measurements.
				defer c.Close()
				var b [1]byte
				for {
					if _, err := io.ReadFull(c, b[:]); err != nil {
						return
					}
					if _, err := c.Write(b[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s, nil
}

func (s *RRServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for _, c := range s.cs {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// runRR opens sessions connections from gen, runs transactions on all of them for warmup, then
// records every transaction's round-trip time for d.
func runRR(ctx context.Context, tb *testbed.Testbed, sessions int, warmup, d time.Duration) (LatencyRound, error) {
	dials := make([]RRDial, sessions)
	for i := range dials {
		dials[i] = RRDial{From: tb.Gen, To: netip.AddrPortFrom(tb.SinkIP, RRPort)}
	}
	return RunRRSessions(ctx, dials, warmup, d)
}

// RRDial is one request/response session: a connection from the namespace from to the server
// at to.
type RRDial struct {
	From *nsutil.NS
	To   netip.AddrPort
}

// Dial opens one TCP connection per dial, its socket created in the dial's namespace. It
// returns those it opened also when one fails (CloseAll closes them).
func Dial(dials []RRDial) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, len(dials))
	for _, dl := range dials {
		err := dl.From.Do(func() error {
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", dl.To.String())
			if err != nil {
				return err
			}
			conns = append(conns, c)
			return nil
		})
		if err != nil {
			return conns, fmt.Errorf("connect to %s from %s: %w", dl.To, dl.From.Name, err)
		}
	}
	return conns, nil
}

// CloseAll closes every connection.
func CloseAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// RunRRSessions opens one connection per dial (its socket created in the dial's namespace), runs
// transactions on all of them at once for warmup, then records every transaction's round-trip
// time for d.
func RunRRSessions(ctx context.Context, dials []RRDial, warmup, d time.Duration) (LatencyRound, error) {
	sessions := len(dials)
	conns, err := Dial(dials)
	defer CloseAll(conns)
	if err != nil {
		return LatencyRound{}, err
	}

	t0 := time.Now()
	from, until := t0.Add(warmup), t0.Add(warmup+d)
	samples := make([][]time.Duration, sessions)
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A lost packet is retransmitted within a second or so; a session stuck longer than
			// this means forwarding stopped, which is worth an error, not a hang.
			c.SetDeadline(until.Add(10 * time.Second))
			lat := make([]time.Duration, 0, 4096)
			var b [1]byte
			for ctx.Err() == nil {
				t := time.Now()
				if t.After(until) {
					break
				}
				if _, err := c.Write(b[:]); err != nil {
					errs[i] = err
					break
				}
				if _, err := io.ReadFull(c, b[:]); err != nil {
					errs[i] = err
					break
				}
				if t.After(from) {
					lat = append(lat, time.Since(t))
				}
			}
			samples[i] = lat
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return LatencyRound{}, fmt.Errorf("request/response: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return LatencyRound{}, err
	}
	all := slices.Concat(samples...)
	if len(all) == 0 {
		return LatencyRound{}, errors.New("request/response: no transaction completed")
	}
	return RRStats(all, d), nil
}

// RRStats summarises the round-trip times of the transactions completed in d (sorts them).
func RRStats(all []time.Duration, d time.Duration) LatencyRound {
	slices.Sort(all)
	var sum, sq float64
	for _, v := range all {
		us := float64(v) / 1e3
		sum += us
		sq += us * us
	}
	n := float64(len(all))
	avg := sum / n
	return LatencyRound{
		Transactions: len(all),
		Seconds:      d.Seconds(),
		TPS:          n / d.Seconds(),
		AvgUs:        avg,
		P99Us:        float64(all[int(math.Ceil(0.99*n))-1]) / 1e3,
		StddevUs:     math.Sqrt(max(sq/n-avg*avg, 0)),
	}
}

func summariseLatency(per map[Mode][]LatencyRound, modes []Mode, sessions int) []LatencyMode {
	var out []LatencyMode
	for _, m := range modes {
		if len(per[m]) == 0 {
			continue
		}
		lm := LatencyMode{Mode: m, Sessions: sessions}
		for _, rd := range per[m] {
			lm.Add(rd)
		}
		lm.TPS = lm.Median(func(r LatencyRound) float64 { return r.TPS })
		lm.AvgUs = lm.Median(func(r LatencyRound) float64 { return r.AvgUs })
		lm.P99Us = lm.Median(func(r LatencyRound) float64 { return r.P99Us })
		lm.StddevUs = lm.Median(func(r LatencyRound) float64 { return r.StddevUs })
		out = append(out, lm)
	}
	return out
}

// setTxCsum sets transmit checksum offload at gen and sink (the testbed turns it off).
//
// Off, the hosts' stacks put complete checksums in every segment, as hosts behind physical NICs
// do, and linuxfp uses native XDP on the DUT's veths. On (veth's default, as in containers), a
// segment leaves the sender with only the pseudo-header sum in its checksum field
// (CHECKSUM_PARTIAL): Linux's forwarding keeps that state in the skb up to the receiver, which
// trusts it; a native XDP redirect would turn the skb into a bare frame and lose it, so linuxfp
// then attaches generic XDP, which redirects the skb itself (see internal/graph).
func setTxCsum(tb *testbed.Testbed, v string) (restore func(), err error) {
	set := func(v string) error {
		if _, err := tb.Gen.Run("ethtool", "-K", "eth0", "tx", v); err != nil {
			return err
		}
		_, err := tb.Sink.Run("ethtool", "-K", "eth0", "tx", v)
		return err
	}
	if err := set(v); err != nil {
		return nil, fmt.Errorf("set tx checksum offload %s on gen and sink: %w", v, err)
	}
	old := "off"
	if v == "off" {
		old = "on"
	}
	return func() { set(old) }, nil
}
