package services

// The services benchmark's TCP traffic: servers at the endpoints (and at the outside host) and
// the clients of its workloads, all in this process with their sockets created inside the
// namespaces (a socket stays in the netns it was created in).
//
// One protocol serves every workload; a connection's first byte says which:
//   - 0x00 (request/response, what runRRSessions sends): every byte is answered with one byte;
//   - 'C' (connection per request): a request of crrRequest bytes, answered with crrResponse
//     bytes; the client closes once it has the response, then the server. The client, not the
//     server, holds TIME_WAIT: kube-proxy masquerades the client to one address with random
//     ports, and a server's TIME_WAIT socket that a new connection's port happens to match
//     rejects its SYN when the new SYN's timestamp is not newer (PAWS; 3% of the connections in
//     a trial), which costs the client a 1 s SYN retransmission: the workload would measure
//     timeouts. The clients' namespaces reuse their TIME_WAIT ports (tcp_tw_reuse=1), as load
//     generators are set up;
//   - 'U' (upload): the server reads and counts everything until the client closes;
//   - 'D' (download): the server writes until the client closes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linuxfp/linuxfp/internal/bench/harness"
	"github.com/linuxfp/linuxfp/internal/nsutil"
)

const (
	opEcho     = 0x00
	opCRR      = 'C'
	opUpload   = 'U'
	opDownload = 'D'

	crrRequest  = 64
	crrResponse = 256
	streamChunk = 128 << 10
)

// svcServer is the servers of one namespace (a pod, or the outside host): one listener per
// address, and what they received.
type svcServer struct {
	ns       *nsutil.NS
	lns      []net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	accepted atomic.Uint64 // connections
	uploaded atomic.Uint64 // bytes of uploads
}

// listenSvc starts servers on addrs in ns.
func listenSvc(ns *nsutil.NS, addrs []netip.AddrPort) (*svcServer, error) {
	s := &svcServer{ns: ns, conns: map[net.Conn]struct{}{}}
	err := ns.Do(func() error {
		for _, a := range addrs {
			ln, err := net.Listen("tcp", a.String())
			if err != nil {
				return err
			}
			s.lns = append(s.lns, ln)
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("listen in %s: %w", ns.Name, err)
	}
	for _, ln := range s.lns {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				s.accepted.Add(1)
				s.mu.Lock()
				s.conns[c] = struct{}{}
				s.mu.Unlock()
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					s.serve(c)
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
				}()
			}
		}()
	}
	return s, nil
}

func (s *svcServer) serve(c net.Conn) {
	defer c.Close()
	var op [1]byte
	if _, err := io.ReadFull(c, op[:]); err != nil {
		return
	}
	switch op[0] {
	case opEcho:
		for {
			if _, err := c.Write(op[:]); err != nil {
				return
			}
			if _, err := io.ReadFull(c, op[:]); err != nil {
				return
			}
		}
	case opCRR:
		var req [crrRequest - 1]byte
		if _, err := io.ReadFull(c, req[:]); err != nil {
			return
		}
		var resp [crrResponse]byte
		if _, err := c.Write(resp[:]); err != nil {
			return
		}
		// The client closes first (see above); then this side.
		c.Read(req[:1])
	case opUpload:
		buf := make([]byte, streamChunk)
		for {
			n, err := c.Read(buf)
			s.uploaded.Add(uint64(n))
			if err != nil {
				return
			}
		}
	case opDownload:
		buf := make([]byte, streamChunk)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
}

// Close stops the listeners and every connection, and waits for their goroutines.
func (s *svcServer) Close() error {
	var errs []error
	for _, ln := range s.lns {
		errs = append(errs, ln.Close())
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(errs...)
}

// svcTraffic is what one TCP workload measured.
type svcTraffic struct {
	Count   uint64  // connections (crr), transactions (rr), bytes (streams)
	Seconds float64 // the measured window
	AvgUs   float64 // crr and rr: per connection / transaction
	P99Us   float64
	Errors  uint64 // crr: connections that failed
	Err     string // crr: the first failure
}

// runCRR opens connections from the clients (worker w from clients[w % len]) to random targets,
// each one request and response, then closed, with workers at once: for warmup, then
// counting the connections that complete within d, and their times from connect() to the
// response. A failed connection is counted and the worker goes on.
func runCRR(ctx context.Context, clients []*nsutil.NS, targets []netip.AddrPort, workers int, warmup, d time.Duration) (svcTraffic, error) {
	t0 := time.Now()
	from, until := t0.Add(warmup), t0.Add(warmup+d)
	lats := make([][]time.Duration, workers)
	errs := make([]uint64, workers)
	first := make([]error, workers)
	setup := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(t0.UnixNano()), uint64(w)))
			var req [crrRequest]byte
			req[0] = opCRR
			var resp [crrResponse]byte
			dialer := net.Dialer{Timeout: 5 * time.Second}
			lat := make([]time.Duration, 0, 1<<14)
			// The whole loop runs on a thread inside the client's namespace: every connect()
			// creates its socket there.
			setup[w] = clients[w%len(clients)].Do(func() error {
				for ctx.Err() == nil {
					t := time.Now()
					if t.After(until) {
						return nil
					}
					err := func() error {
						c, err := dialer.Dial("tcp", targets[rng.IntN(len(targets))].String())
						if err != nil {
							return err
						}
						defer c.Close()
						c.SetDeadline(t.Add(5 * time.Second))
						if _, err := c.Write(req[:]); err != nil {
							return err
						}
						if _, err := io.ReadFull(c, resp[:]); err != nil {
							return err
						}
						if t.After(from) && time.Now().Before(until) {
							lat = append(lat, time.Since(t))
						}
						return nil
					}()
					if err != nil && ctx.Err() == nil && t.After(from) {
						errs[w]++
						if first[w] == nil {
							first[w] = err
						}
					}
				}
				return nil
			})
			lats[w] = lat
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return svcTraffic{}, err
	}
	if err := errors.Join(setup...); err != nil {
		return svcTraffic{}, err
	}
	all := slices.Concat(lats...)
	tr := svcTraffic{Count: uint64(len(all)), Seconds: d.Seconds()}
	for w := range workers {
		tr.Errors += errs[w]
		if tr.Err == "" && first[w] != nil {
			tr.Err = first[w].Error()
		}
	}
	if len(all) == 0 {
		return tr, fmt.Errorf("no connection completed (%d failed: %s)", tr.Errors, tr.Err)
	}
	st := harness.RRStats(all, d)
	tr.AvgUs, tr.P99Us = st.AvgUs, st.P99Us
	return tr, nil
}

// runStreams opens one connection per dial and moves data over all of them at once (upload: the
// clients write, the servers count; download: the servers write, the clients count, having shut
// their sending side down after the request when halfClose) for warmup, then counts the bytes
// received in d (uploaded reads what the servers received so far).
func runStreams(ctx context.Context, dials []harness.RRDial, upload, halfClose bool, uploaded func() uint64, warmup, d time.Duration) (svcTraffic, error) {
	conns, err := harness.Dial(dials)
	defer harness.CloseAll(conns)
	if err != nil {
		return svcTraffic{}, err
	}
	var downloaded atomic.Uint64
	var stopping atomic.Bool
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, streamChunk)
			if upload {
				buf[0] = opUpload
			} else {
				buf[0] = opDownload
			}
			_, err := c.Write(buf[:1])
			if err == nil && halfClose {
				err = c.(interface{ CloseWrite() error }).CloseWrite()
			}
			for err == nil && !stopping.Load() {
				if upload {
					_, err = c.Write(buf)
					continue
				}
				var n int
				n, err = c.Read(buf)
				downloaded.Add(uint64(n))
			}
			if !stopping.Load() {
				errs[i] = err
			}
		}()
	}
	received := func() uint64 {
		if upload {
			return uploaded()
		}
		return downloaded.Load()
	}
	stop := func() {
		stopping.Store(true)
		for _, c := range conns {
			c.SetDeadline(time.Now())
		}
		wg.Wait()
	}
	if err := harness.SleepCtx(ctx, warmup); err != nil {
		stop()
		return svcTraffic{}, err
	}
	b0, t0 := received(), time.Now()
	err = harness.SleepCtx(ctx, d)
	b1, t1 := received(), time.Now()
	stop()
	if err != nil {
		return svcTraffic{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return svcTraffic{}, fmt.Errorf("stream: %w", err)
	}
	if b1 == b0 {
		return svcTraffic{}, errors.New("stream: nothing received")
	}
	return svcTraffic{Count: b1 - b0, Seconds: t1.Sub(t0).Seconds()}, nil
}
