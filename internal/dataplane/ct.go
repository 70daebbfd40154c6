package dataplane

import (
	"encoding/binary"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linuxfp/linuxfp/internal/conntrack"
)

// The conntrack module (bpf/lib/ct.h, nat.h): refreshes the netfilter conntrack entries of the
// connections the fast path forwards, as Linux would, and translates them (NAT).

// CT says where netfilter tracks forwarded connections and how Linux refreshes their entries
// (the netns's nf_conntrack_* sysctls).
type CT struct {
	Active4, Active6 bool
	NAT4             bool // translate IPv4 connections (no rule on prerouting or postrouting)
	NAT6             bool // translate IPv6 connections (likewise)
	Checksum         bool // nf_conntrack_checksum: conntrack verifies L4 checksums
	TCPLiberal       bool // nf_conntrack_tcp_be_liberal
	TCPEstablished   time.Duration
	TCPCloseWait     time.Duration // nf_conntrack_tcp_timeout_close_wait
	TCPUnack         time.Duration // nf_conntrack_tcp_timeout_unacknowledged
	TCPRetrans       time.Duration // nf_conntrack_tcp_timeout_max_retrans
	TCPMaxRetrans    int
	UDPStream        time.Duration
	UDP              time.Duration // unreplied
	// Cache: the conntrack cache may answer (bpf/lib/ct.h): the watcher sees the frees of the
	// entries' objects (observe.Watcher.CtFreeEvents).
	Cache bool
}

func (c CT) flags() linuxfpLfpCtFlags {
	var f linuxfpLfpCtFlags
	if c.Active4 {
		f |= linuxfpLfpCtFlagsLFP_CT_ACTIVE4
	}
	if c.Active6 {
		f |= linuxfpLfpCtFlagsLFP_CT_ACTIVE6
	}
	if c.TCPLiberal {
		f |= linuxfpLfpCtFlagsLFP_CT_TCP_LIBERAL
	}
	if c.NAT4 {
		f |= linuxfpLfpCtFlagsLFP_CT_NAT4
	}
	if c.NAT6 {
		f |= linuxfpLfpCtFlagsLFP_CT_NAT6
	}
	if c.Checksum {
		f |= linuxfpLfpCtFlagsLFP_CT_CHECKSUM
	}
	if c.Cache {
		f |= linuxfpLfpCtFlagsLFP_CT_CACHE
	}
	return f
}

func ms(d time.Duration) uint32 { return uint32(min(d.Milliseconds(), 1<<32-1)) }

// ctModule: the conntrack module has no maps of its own (it uses the kernel's conntrack table),
// only its part of lfp_config.
type ctModule struct{}

func (ctModule) sync(d *Dataplane, data *Data, cfg *linuxfpLfpConfig) (before, after []func() error) {
	c := data.CT
	cfg.CtFlags = c.flags()
	cfg.CtTcpEstablishedMs = ms(c.TCPEstablished)
	cfg.CtTcpCloseWaitMs = ms(c.TCPCloseWait)
	cfg.CtTcpUnackMs = ms(c.TCPUnack)
	cfg.CtTcpRetransMs = ms(c.TCPRetrans)
	cfg.CtTcpMaxRetrans = uint32(c.TCPMaxRetrans)
	cfg.CtUdpStreamMs = ms(c.UDPStream)
	cfg.CtUdpMs = ms(c.UDP)
	return nil, nil
}

// jiffyMs is the setting cfg_ct_jiffy_ms: the ms of a jiffy where the kernel's HZ is known and divides
// 1000 (100, 250, 1000 ...: msecs_to_jiffies() then rounds ms up to whole jiffies), else 0, and
// the data plane refreshes conntrack timeouts without comparing (ct_timeout_is in ct.h).
func jiffyMs() uint32 { return jiffyMsOf(kernelConfigHZ()) }

func jiffyMsOf(hz int, ok bool) uint32 {
	if !ok || hz <= 0 || hz > 1000 || 1000%hz != 0 {
		return 0
	}
	return uint32(1000 / hz)
}

// CTRequest asks for a TCP connection's tracking to be made liberal (see ct_tcp in
// bpf/lib/ct.h): Tuple is a packet's, in the entry's reply direction when Reply.
type CTRequest struct {
	Tuple conntrack.Tuple
	Reply bool
}

// ReadCTRequests delivers the data plane's conntrack requests to fn until Close.
func (d *Dataplane) ReadCTRequests(fn func(CTRequest)) error {
	return d.readRing(d.maps.LfpCtRequests, "conntrack request ring", func(b []byte) {
		if r, ok := parseCTRequest(b); ok {
			fn(r)
		}
	})
}

// parseCTRequest decodes a struct lfp_ct_req.
func parseCTRequest(b []byte) (CTRequest, bool) {
	// family u8, proto u8, dir u8, pad u8, src [16], dst [16], sport be16, dport be16
	if len(b) < 40 {
		return CTRequest{}, false
	}
	var src, dst netip.Addr
	switch b[0] {
	case unix.AF_INET:
		src, dst = netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4([4]byte(b[20:24]))
	case unix.AF_INET6:
		src, dst = netip.AddrFrom16([16]byte(b[4:20])), netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return CTRequest{}, false
	}
	return CTRequest{
		Tuple: conntrack.Tuple{Proto: b[1], Src: src, Dst: dst,
			SPort: binary.BigEndian.Uint16(b[36:]), DPort: binary.BigEndian.Uint16(b[38:])},
		Reply: b[2] == 1,
	}, true
}

// ctSettings: the families the conntrack module is built in for.
func ctSettings(k *settings, s Spec, companion bool) {
	k.Ct4, k.Ct6 = boolU32(s.Conntrack4), boolU32(s.Conntrack6)
	k.CtJiffyMs = jiffyMs()
}
