/* Router module: IPv4/IPv6 forwarding through the kernel's own FIB (bpf_fib_lookup), exactly as
 * ip_forward()/ip6_forward() would do it, or the packet goes to Linux untouched with its reason.
 * One core for both families: a family's entry point (router_ipv4, router_ipv6) checks what that
 * family's input path checks and fills struct router_pkt; every step after it is shared (the
 * pipeline in bpf/linuxfp.c chains them, with the other modules' steps between). */
#ifndef LFP_ROUTER_H
#define LFP_ROUTER_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"
#include "stats.h"
#include "iface.h"
#include "state.h"
#include "fdb.h"
#include "neigh.h"
#include "tx.h"
#include "gate.h"
#include "ct.h"
#include "nat.h"
#include "vxlan.h"
#include "fibcache.h"
#include "local.h"

/* Frozen per interface: which families this interface forwards in the fast path (the controller
 * turns a family off when, e.g., netfilter rules could see forwarded packets of that family). */
LFP_SETTING(__u32, router4, 0, "the router module forwards IPv4");
LFP_SETTING(__u32, router6, 0, "the router module forwards IPv6");
/* The ingress is a veth: frames may be skbs from a local stack. The controller attaches native XDP
 * there only if the peer has no TCP/UDP checksum offload (otherwise generic XDP, which keeps the
 * skb's CHECKSUM_PARTIAL state); SCTP's CRC offload is a separate feature, so SCTP goes to Linux. */
LFP_SETTING(__u32, skb_sender, 0, "frames may be skbs from a local stack (a veth)");
/* ip_forward() sets skb->priority = rt_tos2priority(tos) (net/ipv4/route.c's ip_tos2prio[],
 * indexed by IPTOS_TOS(tos) >> 1) when net.ipv4.ip_forward_update_priority=1, the default, and
 * leaves it alone otherwise; the egress qdisc may classify by it. */
static __always_inline __u32 ipv4_tos2prio(__u8 tos)
{
	switch ((tos & 0x1E) >> 1) {
	case 4: case 5: case 6: case 7:
		return 2; /* TC_PRIO_BULK */
	case 8: case 9: case 10: case 11:
		return 6; /* TC_PRIO_INTERACTIVE */
	case 12: case 13: case 14: case 15:
		return 4; /* TC_PRIO_INTERACTIVE_BULK */
	}
	return 0; /* TC_PRIO_BESTEFFORT */
}

/* What each bpf_fib_lookup() result means for the stack (net/core/filter.c). Only SUCCESS is
 * forwarded here; everything else is Linux's to handle, because Linux does something we do not:
 *  NOT_FWDED     no route at all (ICMP net unreachable), or a local, broadcast or multicast
 *                route: Linux delivers it locally or answers.
 *  BLACKHOLE     Linux drops it and counts it.
 *  UNREACHABLE   Linux sends ICMP host unreachable.
 *  PROHIBIT      Linux sends ICMP administratively prohibited.
 *  FWD_DISABLED  forwarding is off on the ingress device: Linux does not forward.
 *  UNSUPP_LWT    the route encapsulates (MPLS, seg6 ...): Linux's lwtunnel output does that.
 *  NO_NEIGH      Linux must resolve the neighbour (ARP/ND) and queue the packet meanwhile.
 *  FRAG_NEEDED   larger than the egress MTU: Linux fragments or sends ICMP frag-needed/too-big. */
static __always_inline enum lfp_reason fib_reason(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return LFP_PASS_FIB_NOT_FWDED;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
		return LFP_PASS_FIB_BLACKHOLE;
	case BPF_FIB_LKUP_RET_UNREACHABLE:
		return LFP_PASS_FIB_UNREACHABLE;
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return LFP_PASS_FIB_PROHIBIT;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return LFP_PASS_FIB_FWD_DISABLED;
	case BPF_FIB_LKUP_RET_UNSUPP_LWT:
		return LFP_PASS_FIB_UNSUPP_LWT;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return LFP_PASS_FIB_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return LFP_PASS_FIB_FRAG_NEEDED;
	}
	return LFP_PASS_FIB_OTHER;
}

/* A frame to the bridge's MAC whose destination address prerouting's DNAT changed, to an address
 * routed out of that same bridge: with br_netfilter, Linux does not route it but bridges it there
 * (br_nf_pre_routing_finish(): "bridged_dnat", br_nf_pre_routing_finish_ipv6() alike, then
 * br_nf_pre_routing_finish_bridge()): the destination MAC becomes the neighbour's, the source MAC
 * and the TTL or hop limit stay, no ICMP redirect, no priority from the TOS; br_handle_frame_finish()
 * then forwards it to the port the FDB names, through the forward and postrouting hooks with the
 * bridge as input and output device (the same rules the caller classified it with). Only for
 * neighbours Linux would send to without a state change (a STALE one goes to Linux, as for routed
 * packets; neigh_ok: router_fib's answer says its next hop is not in the set). (With forwarding
 * off, IPv4's ip_route_input() fails and br_netfilter falls back to an output route; IPv6's route
 * lookup does not fail for it. Either way the FIB lookup here answers FWD_DISABLED first:
 * Linux's.) Returns LFP_FORWARDED with the redirect set up and scr->br_dnat set. */
static __always_inline enum lfp_reason router_bridged_dnat(lfp_ctx *ctx, const struct lfp_config *cfg,
							   const struct bpf_fib_lookup *fib, __u32 l3len, int v4,
							   int neigh_ok)
{
	struct lfp_scratch *scr = lfp_scratch();
	__u32 in = ctx_ingress_ifindex(ctx), bridge = lfp_l3_ifindex(ctx), out = 0;
	struct lfp_fdb_val *dst;
	struct lfp_l2_dev *port;
	enum lfp_reason r;

	/* Not translated, or its destination stays: Linux routes it back out (a hairpin). */
	if (!scr || !scr->ct.nat || !nat_daddr_moved(&scr->ct))
		return LFP_PASS_HAIRPIN;
	/* Without br_netfilter's hooks for the family the frame goes up to IP, whose DNAT and
	 * forwarding route it back out of the bridge (TTL, redirects): Linux's. */
	port = l2_dev(in);
	if (!bridge || !port || port->bridge != bridge || !(port->flags & (v4 ? LFP_L2_NF4 : LFP_L2_NF6)))
		return LFP_PASS_HAIRPIN;
	r = neigh_ok ? 0 : neigh_stale(cfg, fib);
	if (r)
		return r;
	/* Back out of the port it came in by (a pod reaching itself through its service): the
	 * port's hairpin mode decides, Linux's. */
	dst = fdb_lookup(bridge, fib->dmac);
	if (dst && dst->port == in)
		return LFP_PASS_HAIRPIN;
	r = bridge_out_entry(bridge, dst, in, port->flags, l3len, &out);
	if (r != LFP_FORWARDED)
		return r;
	r = gate_egress(out);
	if (r == LFP_FORWARDED)
		r = tx_prepare(ctx, out, l3len, TX_PRIO_KEEP);
	if (r == LFP_FORWARDED)
		scr->br_dnat = 1;
	return r;
}

/* The router's view of one packet, from its family's entry point through the shared steps. In
 * each inlined copy of the pipeline v4 is a constant, so the compiler keeps one family's code. */
struct router_pkt {
	struct bpf_fib_lookup *fib; /* the lookup's input, then its result (the caller's stack) */
	void *l3, *l4, *data_end;   /* valid until router_egress() */
	struct lfp_config *cfg;
	struct lfp_scratch *scr;
	const struct lfp_if *iface; /* the ingress interface's data (linuxfp_rx looked it up) */
	struct gate_ref gate;       /* the gate's maps (linuxfp_rx looked them up) */
	/* The device Linux routes the packet from: the ingress device, or on a bridge port the
	 * bridge (br_pass_frame_up() hands frames for the bridge's MAC to the bridge device). */
	__u32 in_ifindex;
	__u32 tot;    /* IP length, header included */
	__u32 l3len;  /* bytes after the Ethernet header */
	__u32 l4len;  /* tot less the IP header */
	__u32 mtulen; /* what the MTU checks see (router_fib) */
	__u32 prio;   /* the skb priority Linux's forwarding gives it (router_fib) */
	__u8 tos;
	__u8 proto;
	__u8 v4;
	__u8 fw;      /* the filter module runs for this family */
	__u8 neigh_ok; /* the FIB cache's answer says the next hop is not STALE (router_fib) */
	/* Routed as the vxlan device it was decapsulated for would route it, in the underlay's
	 * program (linuxfp_decap_route): every step that would not forward it sends it to that
	 * device instead. A constant, like v4. */
	__u8 inner;
};

/* A GSO train (TC only: a TCP stack's super-packet, or GRO's) leaves as segments of
 * ip header + TCP header + gso_size bytes: Linux checks that length against the MTU
 * (skb_gso_validate_network_len()), so the fast path does too. Returns the length to check, or
 * 0 when the fast path cannot tell (not TCP, a header not all there, padding or an IP length
 * that is not the train's, e.g. BIG TCP's 0). */
static __always_inline __u32 router_gso_seglen(const lfp_ctx *ctx, void *l4, void *data_end, __u8 proto,
					       __u32 l4off, __u32 tot, __u32 l3len)
{
	struct tcphdr_min {
		__be32 ports, seq, ack;
		__u8 res1_doff;
	} *th = l4;

	if (proto != IPPROTO_TCP || tot != l3len || (void *)(th + 1) > data_end)
		return 0;
	return l4off + (th->res1_doff >> 4) * 4 + ctx_gso_size(ctx);
}

/* The end of a family's entry point: where the shared steps find the headers (hlen: the IP
 * header's, proto: the protocol after it). */
static __always_inline enum lfp_reason router_headers(struct router_pkt *p, void *l3, __u32 hlen, __u8 proto,
						      void *data_end)
{
	p->l3 = l3;
	p->l4 = l3 + hlen;
	p->data_end = data_end;
	p->l4len = p->tot - hlen;
	p->proto = proto;
	return LFP_FORWARDED;
}

static __always_inline int ipv4_martian_src(__be32 addr)
{
	__u32 h = bpf_ntohl(addr);

	/* 0/8 and limited broadcast are martian sources (ip_route_input_slow); 127/8 is unless
	 * route_localnet; multicast is martian. Class E is routable but rare: Linux decides. */
	return (h >> 24) == 0 || (h >> 24) == 127 || h >= 0xE0000000;
}

static __always_inline int ipv4_martian_dst(__be32 addr)
{
	__u32 h = bpf_ntohl(addr);

	/* 0/8 and 127/8 are martian destinations, multicast and broadcast are not forwarded as
	 * unicast; class E left to Linux. */
	return (h >> 24) == 0 || (h >> 24) == 127 || h >= 0xE0000000;
}

static __always_inline int ipv4_local_src(const struct lfp_config *cfg, __be32 saddr)
{
	/* fib_validate_source(): a source that is one of this host's addresses is martian (unless
	 * accept_local: then Linux decides, we stay conservative). With custom local routes or fib
	 * rules Linux does a reverse lookup that also rejects sources routed as local or broadcast;
	 * the controller puts every such address (and prefix) into these maps. */
	return local_route4(cfg, saddr);
}

static __always_inline int icmp4_is_error(__u8 type)
{
	/* dest unreachable, source quench, redirect, time exceeded, parameter problem */
	return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

/* IPv4's entry point: what ip_rcv_core() and ip_forward() check before routing, and the routing
 * lookup's IPv4 fields. */
static __always_inline enum lfp_reason router_ipv4(lfp_ctx *ctx, struct router_pkt *p)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct iphdr *iph = data + sizeof(struct ethhdr);
	struct bpf_fib_lookup *fib = p->fib;

	if (!cfg_router4)
		return LFP_PASS_FAMILY_OFF;
	if ((void *)(iph + 1) > data_end)
		return LFP_PASS_MALFORMED;
	/* ip_rcv_core() drops these; Linux counts them, so let it see them. */
	if (iph->version != 4 || iph->ihl < 5)
		return LFP_PASS_MALFORMED;
	/* Options (record route, timestamps, source routing, router alert) are processed by
	 * ip_forward_options() and may make Linux answer with ICMP. */
	if (iph->ihl != 5)
		return LFP_PASS_IP_OPTIONS;
	p->l3len = ctx_len(ctx) - sizeof(struct ethhdr);
	p->tot = bpf_ntohs(iph->tot_len);
	if (p->tot < sizeof(*iph) || p->tot > p->l3len)
		return LFP_PASS_MALFORMED;
	/* Fragments: conntrack/defrag or the MTU logic may treat them differently. */
	if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return LFP_PASS_FRAGMENT;
	if (ipv4_csum_bad(iph))
		return LFP_PASS_BAD_CSUM;
	/* Linux sends ICMP time exceeded. */
	if (iph->ttl <= 1)
		return LFP_PASS_TTL;
	if (ipv4_martian_src(iph->saddr))
		return LFP_PASS_MARTIAN_SRC;
	if (ipv4_martian_dst(iph->daddr))
		return LFP_PASS_MARTIAN_DST;

	/* Clang 14 trap (KERNEL-NOTES): no initialiser for this struct; zero it, then assign. */
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET;
	fib->tos = iph->tos;
	fib->ipv4_src = iph->saddr;
	fib->ipv4_dst = iph->daddr;
	return router_headers(p, iph, sizeof(*iph), iph->protocol, data_end);
}

static __always_inline int ipv6_martian(const struct lfp_in6 *a, int src)
{
	__u32 w0 = a->a[0];

	/* Multicast: martian as a source; as a destination it is not unicast forwarding. */
	if ((w0 & bpf_htonl(0xff000000)) == bpf_htonl(0xff000000))
		return 1;
	/* Link-local: ip6_forward() answers with ICMP (source) or cannot forward it (destination). */
	if ((w0 & bpf_htonl(0xffc00000)) == bpf_htonl(0xfe800000))
		return 1;
	if (w0 == 0 && a->a[1] == 0) {
		/* ::, ::1 and v4-mapped: dropped by ip6_rcv_core() or handled specially. */
		if (a->a[2] == 0 && (a->a[3] == 0 || a->a[3] == bpf_htonl(1)))
			return 1;
		if (a->a[2] == bpf_htonl(0x0000ffff))
			return 1;
	}
	return 0;
}

static __always_inline int ipv6_local_src(const struct lfp_config *cfg, const struct lfp_in6 *saddr)
{
	return local_route6(cfg, saddr);
}

/* IPv6's entry point: what ip6_rcv_core() and ip6_forward() check before routing, and the routing
 * lookup's IPv6 fields. */
static __always_inline enum lfp_reason router_ipv6(lfp_ctx *ctx, struct router_pkt *p)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct bpf_fib_lookup *fib = p->fib;

	if (!cfg_router6)
		return LFP_PASS_FAMILY_OFF;
	if ((void *)(ip6 + 1) > data_end)
		return LFP_PASS_MALFORMED;
	if (ip6->version != 6)
		return LFP_PASS_MALFORMED;
	/* Hop-by-hop options (router alert, jumbograms) are processed by Linux. */
	if (ip6->nexthdr == NEXTHDR_HOP)
		return LFP_PASS_V6_HOPOPTS;
	p->l3len = ctx_len(ctx) - sizeof(struct ethhdr);
	p->tot = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	if (p->tot > p->l3len)
		return LFP_PASS_MALFORMED;
	/* Linux sends ICMPv6 time exceeded. */
	if (ip6->hop_limit <= 1)
		return LFP_PASS_TTL;

	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = AF_INET6;
	/* ip6_flowinfo(): traffic class and flow label, as ip6_route_input() uses them. */
	fib->flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0FFFFFFF);
	__builtin_memcpy(fib->ipv6_src, &ip6->saddr, sizeof(fib->ipv6_src));
	__builtin_memcpy(fib->ipv6_dst, &ip6->daddr, sizeof(fib->ipv6_dst));
	if (ipv6_martian((struct lfp_in6 *)fib->ipv6_src, 1))
		return LFP_PASS_MARTIAN_SRC;
	if (ipv6_martian((struct lfp_in6 *)fib->ipv6_dst, 0))
		return LFP_PASS_MARTIAN_DST;
	return router_headers(p, ip6, sizeof(*ip6), ip6->nexthdr, data_end);
}

/* ICMP errors: Linux's multipath hash uses the embedded header of an ICMP error; bpf_fib_lookup()
 * hashes the outer one, so with ECMP the two could pick different nexthops. */
static __always_inline int router_icmp_error(const struct router_pkt *p)
{
	__u8 *type = p->l4;

	if (p->proto != (p->v4 ? IPPROTO_ICMP : NEXTHDR_ICMPV6))
		return 0;
	if ((void *)(type + 1) > p->data_end || p->l4len == 0)
		return 0;
	/* ICMPv6 errors are the types below 128. */
	return p->v4 ? icmp4_is_error(*type) : *type < 128;
}

/* The shared checks before the routing lookup, the settings, and the scratch space with the
 * filter's view of the packet. */
static __always_inline enum lfp_reason router_prepare(lfp_ctx *ctx, struct router_pkt *p)
{
	struct bpf_fib_lookup *fib = p->fib;
	struct lfp_scratch *scr;
	int off;

	fib->l4_protocol = p->proto;
	fib->tot_len = p->tot;
	fib->ifindex = p->in_ifindex;
	if (ctx_gso_size(ctx)) {
		fib->tot_len = router_gso_seglen(ctx, p->l4, p->data_end, p->proto, p->tot - p->l4len,
						 p->tot, p->l3len);
		if (!fib->tot_len)
			return LFP_PASS_GSO;
	}

	/* (A vxlan device is no skb sender: not for an inner packet.) */
	if (cfg_skb_sender && !p->inner && p->proto == IPPROTO_SCTP)
		return LFP_PASS_SCTP_OFFLOAD;

	/* The same L4 "ports" the flow dissector gives fib rules (ipproto/sport/dport) and the L4
	 * multipath hash; zero when the header is not all there, as in Linux. */
	off = l4_ports_offset(p->proto);
	if (off >= 0) {
		__be16 *ports = p->l4 + off;

		if ((void *)(ports + 2) <= p->data_end && off + 4 <= p->l4len) {
			fib->sport = ports[0];
			fib->dport = ports[1];
		}
	} else if (router_icmp_error(p)) {
		return LFP_PASS_ICMP_ERROR;
	}

	p->cfg = lfp_config();
	if (!p->cfg)
		return LFP_PASS_FIB_OTHER;
	if (p->v4 ? ipv4_local_src(p->cfg, fib->ipv4_src) :
		    ipv6_local_src(p->cfg, (struct lfp_in6 *)fib->ipv6_src))
		return LFP_PASS_LOCAL_SRC;
	p->fw = !!(p->cfg->fw_flags & (p->v4 ? LFP_FW_ACTIVE4 : LFP_FW_ACTIVE6));

	scr = lfp_scratch();
	if (!scr)
		return LFP_PASS_FIB_OTHER;
	p->scr = scr;
	scr->vx_on = 0;
	scr->br_dnat = 0;
	/* The filter's view of the packet is read whole by the filter alone (filter_l4 and
	 * filter_forward, both only with p->fw); without it only its addresses are (conntrack:
	 * router_conntrack, router_dnat), and its ~100 bytes are not cleared. */
	if (p->fw) {
		__builtin_memset(&scr->fp, 0, sizeof(scr->fp));
		scr->fp.src_not_local = 1;
		scr->fp.v6 = !p->v4;
	}
	if (p->v4) {
		scr->fp.src[0] = fib->ipv4_src;
		scr->fp.dst[0] = fib->ipv4_dst;
	} else {
		__builtin_memcpy(scr->fp.src, fib->ipv6_src, sizeof(fib->ipv6_src));
		__builtin_memcpy(scr->fp.dst, fib->ipv6_dst, sizeof(fib->ipv6_dst));
	}
	scr->ct.nat = 0;
	scr->ct.refresh = 0;
	return LFP_FORWARDED;
}

/* The conntrack module, where nf_conntrack_in() runs (prerouting, before routing). */
static __always_inline enum lfp_reason router_conntrack(lfp_ctx *ctx, struct router_pkt *p)
{
	struct lfp_scratch *scr = p->scr;
	enum lfp_reason r;

	if (!(p->cfg->ct_flags & (p->v4 ? LFP_CT_ACTIVE4 : LFP_CT_ACTIVE6)))
		return LFP_FORWARDED;
	if (!(p->v4 ? cfg_ct4 : cfg_ct6))
		return LFP_PASS_RELOADING;
	r = ct_prerouting(ctx, p->cfg, &scr->ct, scr->fp.src, scr->fp.dst, !p->v4, p->proto, p->l4,
			  p->data_end, p->l4len, scr->buf, 1);
	if (r != LFP_FORWARDED)
		return r;
	scr->fp.ctstate = scr->ct.state;
	return LFP_FORWARDED;
}

/* VXLAN for a device of this host: decapsulated here, or Linux's (vxlan_rx). Returns 1 with
 * *verdict set, or 0 when the packet is no such thing (only an untranslated IPv4 UDP packet can
 * be). */
static __always_inline int router_vxlan_rx(lfp_ctx *ctx, const struct router_pkt *p, int *verdict)
{
	if (!p->v4 || !p->cfg->vxlans || p->proto != IPPROTO_UDP || p->scr->ct.nat)
		return 0;
	return vxlan_rx(ctx, p->cfg, p->l3, p->data_end, p->tot, &p->scr->fc, fib_cache_gen_in(p->cfg, p->gate.g, 1),
			&p->scr->vxrx, &p->scr->vxu, &p->gate, verdict);
}

/* A translated connection: prerouting's translation (the destination, or for a reply the
 * un-SNAT'd destination) comes before routing and the forward rules; postrouting's (the source)
 * after them (nat.h, in router_xmit). */
static __always_inline enum lfp_reason router_dnat(struct router_pkt *p)
{
	struct lfp_scratch *scr = p->scr;

	if (!(p->v4 ? cfg_ct4 : cfg_ct6) || !scr->ct.nat)
		return LFP_FORWARDED;
	if (p->v4) {
		p->fib->ipv4_dst = scr->ct.nat_daddr[0];
		scr->fp.dst[0] = scr->ct.nat_daddr[0];
	} else {
		/* ip6_rcv_core() checked the destination the packet came with, not this one: a DNAT
		 * to a link-local, multicast or loopback address is Linux's to handle. */
		if (ipv6_martian((const struct lfp_in6 *)scr->ct.nat_daddr, 0))
			return LFP_PASS_CT_NAT;
		__builtin_memcpy(p->fib->ipv6_dst, scr->ct.nat_daddr, 16);
		__builtin_memcpy(scr->fp.dst, scr->ct.nat_daddr, 16);
	}
	p->fib->dport = scr->ct.nat_dport;
	scr->fp.dport = bpf_ntohs(scr->ct.nat_dport);
	return LFP_FORWARDED;
}

/* The routing decision: the kernel's FIB, or its answer kept by the FIB cache (fibcache.h). */
static __always_inline enum lfp_reason router_fib(lfp_ctx *ctx, struct router_pkt *p)
{
	struct bpf_fib_lookup *fib = p->fib;
	__u64 gen;
	int rc;

	/* Read before the lookup, which overwrites them (tot_len shares a union with mtu_result,
	 * tos with rt_metric). fib->tot_len is the length the MTU checks see: a GSO train's
	 * segment length. */
	p->mtulen = fib->tot_len;
	p->prio = p->v4 && p->cfg->fwd_update_prio4 ? ipv4_tos2prio(fib->tos) : TX_PRIO_KEEP;
	p->tos = fib->tos;
	gen = fib_cache_gen_in(p->cfg, p->gate.g, p->v4);
	rc = fib_lookup_cached(ctx, p->cfg, &p->scr->fc, fib, p->v4, gen);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_reason(rc);
	p->neigh_ok = p->scr->fc.neigh_ok;
	return LFP_FORWARDED;
}

/* Checks on the routing decision, the last one setting up the redirect; then the Ethernet padding
 * beyond the IP length is trimmed as ip_rcv_core() and ip6_rcv_core() do (only now, when the
 * packet is surely ours: a packet handed to Linux stays untouched). LFP_FORWARDED when the packet
 * may be rewritten and sent; every packet pointer is invalid afterwards. */
static __always_inline enum lfp_reason router_egress(lfp_ctx *ctx, const struct router_pkt *p)
{
	const struct bpf_fib_lookup *fib = p->fib;
	const struct lfp_config *cfg = p->cfg;
	__u32 out = fib->ifindex;
	enum lfp_reason r;

	/* Out the device it came in on: Linux may send an ICMP redirect (send_redirects) and does
	 * the full source validation for this case. */
	if (fib->ifindex == p->in_ifindex) {
		if ((p->v4 ? cfg_ct4 : cfg_ct6) && cfg_bridge && !p->inner)
			r = router_bridged_dnat(ctx, cfg, fib, p->mtulen, p->v4, p->neigh_ok);
		else
			r = LFP_PASS_HAIRPIN;
		goto trim;
	}

	/* ip_forward() and ip6_forward() honour an unlocked route MTU metric; bpf_fib_lookup() checks
	 * only the device MTU, locked metrics and PMTU exceptions (found by the differential test
	 * for IPv6). Packets above the smallest route MTU of their family go to Linux. */
	if (p->v4 && cfg->route_mtu4 && p->mtulen > cfg->route_mtu4)
		return LFP_PASS_ROUTE_MTU;
	if (!p->v4 && cfg->route_mtu6 && p->mtulen > cfg->route_mtu6)
		return LFP_PASS_ROUTE_MTU;

	/* Not looked up again where the FIB cache's answer says the next hop is not in the set. */
	r = p->neigh_ok ? 0 : neigh_stale(cfg, fib);
	if (r)
		return r;

	/* Router -> bridge: a route out of a bridge device ends in br_dev_xmit(), which sends the
	 * frame to the port its FDB names for the neighbour's MAC (bridge_out_port). Before the
	 * vxlan step: a bridge is never a vxlan device, and the bridge lookup (an array's) costs
	 * less than the vxlan one (a hash's). */
	if (cfg->bridges) {
		struct lfp_l2_dev *br = l2_dev(fib->ifindex);

		if (br && (br->flags & LFP_L2_BRIDGE)) {
			/* Something on the bridge device's own transmit path (tc, qdisc, nft). */
			if (!(br->flags & LFP_L2_OUT_OK))
				return LFP_PASS_BR_CONFIG;
			r = bridge_out_port(fib->ifindex, fib->dmac, 0, 0, p->mtulen, &out);
			if (r != LFP_FORWARDED)
				return r;
		}
	}

	/* Into a vxlan device: encapsulated here when everything the driver would do is
	 * reproduced (vxlan.h), otherwise the redirect below hands it to the driver itself. */
	if (CTX_TUNNEL && p->v4 && cfg->vxlans && out == fib->ifindex && !p->inner) {
		struct lfp_scratch *scr = p->scr;

		/* Not a translated packet: the driver hashes the translated inner packet for the
		 * source port; its path. */
		if (!scr->ct.nat && vxlan_remote(&scr->fc, out, fib->dmac) &&
		    vxlan_plan(ctx, cfg, out, &scr->fc.vx, fib, p->tos, p->mtulen, p->prio, &scr->vx, &scr->ct,
			       (struct bpf_fib_lookup *)scr->ofib, &scr->fc)) {
			scr->vx_on = 1;
			r = LFP_FORWARDED;
			goto trim;
		}
	}

	/* An inner packet routed in the underlay's program leaves with the underlay as its skb's
	 * skb_iif, where the device's program would have left the vxlan device: only into a
	 * container (a veth peer in another namespace, whose transmit path is empty), whose
	 * receive path sets skb_iif anew, can nothing tell the two apart (a qdisc's classifier, a
	 * tc egress filter could: cls_flow keys on it). */
	if (CTX_TUNNEL && p->inner) {
		const struct lfp_tc_tx *tx = tc_tx(out);

		if (!tx || !(tx->flags & LFP_TX_PEER))
			return LFP_PASS_EGRESS_NOT_READY;
	}

	/* Last: only devices whose changes are followed (gate.h) and that take the packet as
	 * Linux's transmit would (tx.h). The device the route names was checked after the lookup
	 * (linuxfp_route): only a port of a bridge it names is new here. */
	r = out == fib->ifindex ? LFP_FORWARDED : gate_egress_in(&p->gate, out);
	if (r == LFP_FORWARDED)
		r = tx_prepare(ctx, out, p->mtulen, p->prio);
trim:
	if (r != LFP_FORWARDED)
		return r;
	if (p->tot < p->l3len && ctx_trim(ctx, p->l3len - p->tot))
		return LFP_PASS_MALFORMED;
	return LFP_FORWARDED;
}

/* The packet is the fast path's: encapsulated (vxlan.h), translated (nat.h) and bridged back out
 * (router_bridged_dnat), or its TTL or hop limit decreased; then the Ethernet header rewritten as
 * neigh_resolve_output() would. The redirect is set up: a rewrite that fails (none for a linear
 * header) cannot hand the packet to Linux half rewritten. */
static __always_inline int router_xmit(lfp_ctx *ctx, const struct router_pkt *p)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct lfp_scratch *scr = p->scr;
	struct ethhdr *eth = data;

	if (p->v4) {
		struct iphdr *iph = data + sizeof(*eth);

		if ((void *)(iph + 1) > data_end)
			return CTX_DROP; /* cannot happen: a trim keeps tot >= 20 bytes */
		if (CTX_TUNNEL && scr->vx_on)
			return vxlan_push(ctx, &scr->vx);
		if (cfg_ct4 && scr->ct.nat) {
			if (nat_rewrite4(ctx, &scr->ct))
				return CTX_DROP;
			data = ctx_data(ctx);
			data_end = ctx_data_end(ctx);
			eth = data;
			iph = data + sizeof(*eth);
			if ((void *)(iph + 1) > data_end)
				return CTX_DROP;
			if (scr->br_dnat) {
				/* Bridged, not routed: the neighbour's MAC, nothing else. */
				__builtin_memcpy(eth->h_dest, p->fib->dmac, ETH_ALEN);
				lfp_count_in(ctx, p->iface, LFP_BRIDGED);
				return CTX_REDIRECT;
			}
		}
		ipv4_decrease_ttl(iph);
	} else {
		struct ipv6hdr *ip6 = data + sizeof(*eth);

		if ((void *)(ip6 + 1) > data_end)
			return CTX_DROP; /* cannot happen: a trim keeps the 40-byte header */
		if (cfg_ct6 && scr->ct.nat) {
			/* The same length: the MTU checks (router_egress) held for it. */
			if (nat_rewrite6(ctx, &scr->ct))
				return CTX_DROP;
			data = ctx_data(ctx);
			data_end = ctx_data_end(ctx);
			eth = data;
			ip6 = data + sizeof(*eth);
			if ((void *)(ip6 + 1) > data_end)
				return CTX_DROP;
			if (scr->br_dnat) {
				/* Bridged, not routed: the neighbour's MAC, nothing else. */
				__builtin_memcpy(eth->h_dest, p->fib->dmac, ETH_ALEN);
				lfp_count_in(ctx, p->iface, LFP_BRIDGED);
				return CTX_REDIRECT;
			}
		}
		ip6->hop_limit--;
	}
	mac_copy_w(eth->h_dest, p->fib->dmac);
	mac_copy_w(eth->h_source, p->fib->smac);
	lfp_count_in(ctx, p->iface, LFP_FORWARDED);
	return CTX_REDIRECT;
}

#endif
