/* VXLAN module: a packet the router sends into a vxlan device is encapsulated here, with the
 * outer headers the device's driver would build (vxlan_xmit_one(), udp_tunnel_xmit_skb(),
 * iptunnel_xmit()), and sent out of the underlay device the outer route names; a VXLAN packet for
 * a device of this host is decapsulated into that device (vxlan_rx). Whatever the driver would do
 * that is not reproduced here makes the packet take the driver's own path (a redirect to the vxlan
 * device, or Linux's receive path: exact by construction), never a different result. Only an skb
 * can be encapsulated or decapsulated so (ctx.h): at XDP every such packet takes that path. */
#ifndef LFP_VXLAN_H
#define LFP_VXLAN_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"
#include "stats.h"
#include "ct.h"
#include "tx.h"
#include "gate.h"
#include "neigh.h"
#include "fibcache.h"

#define VXLAN_HLEN   8
#define VXLAN_ENCAP  (sizeof(struct iphdr) + 8 + VXLAN_HLEN + ETH_HLEN) /* 50 */
#define VXLAN_HF_VNI 0x08000000 /* the I flag, host byte order */
#define INET_ECN_MASK 3
#define INET_ECN_CE   3
#define INET_ECN_ECT_0 2

/* vxlan devices the fast path encapsulates for, by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lfp_vxlan_dev);
	__uint(max_entries, 256);
} lfp_vxlan SEC(".maps");

/* Their forwarding databases: single-remote, unicast IPv4 entries only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_vxfdb_key);
	__type(value, struct lfp_vxfdb_val);
	__uint(max_entries, 65536);
} lfp_vxfdb SEC(".maps");

/* What vxlan_plan decided, for vxlan_push once the packet is surely the fast path's. */
struct vxlan_plan {
	__u32 saddr, daddr;
	__u32 vni;
	__u16 sport, dport;
	__u8 tos, ttl;
	__u8 l4_hash;    /* the skb's hash is an L4 one (iptunnel_xmit() keeps only those) */
	__u8 udpcsum;    /* compute the outer UDP checksum, from the inner one left to offload */
	__u16 csum_off;  /* udpcsum: the inner checksum field, from the inner frame's start */
	__u8 dmac[ETH_ALEN]; /* the underlay nexthop */
	__u8 smac[ETH_ALEN];
	__u8 inner_dmac[ETH_ALEN];
	__u8 inner_smac[ETH_ALEN];
};

/* INET_ECN_encapsulate(): the outer ECN field follows the inner one, CE becoming ECT(0). */
static __always_inline __u8 vxlan_ecn_encap(__u8 tos, __u8 inner)
{
	tos &= ~INET_ECN_MASK;
	if ((inner & INET_ECN_MASK) == INET_ECN_CE)
		return tos | INET_ECN_ECT_0;
	return tos | (inner & INET_ECN_MASK);
}

/* The data of vxlan device dev (lfp_vxlan) and the remote its forwarding database names for
 * the inner destination MAC dmac (lfp_vxfdb: vxlan_xmit()'s vxlan_find_mac()), in fc->vx: kept
 * with the FIB cache's answer that routed the packet into dev (fc->vx_ok, fib_cache_get()),
 * else read from the maps and kept there (fib_cache_keep_vx() says why that copy holds). An
 * answer names one device and one next hop MAC, so the copy is the one the maps would give.
 * Two hash map lookups, each a call, per encapsulated packet otherwise. 0: the device or the
 * remote is not the fast path's (the driver's path). */
static __always_inline int vxlan_remote(struct fib_cache_scr *fc, __u32 dev, const __u8 *dmac)
{
	struct lfp_vxfdb_key k = {};
	struct lfp_vxlan_dev *vx;
	struct lfp_vxfdb_val *rd;

	if (fc->vx_ok)
		return 1;
	vx = bpf_map_lookup_elem(&lfp_vxlan, &dev);
	if (!vx)
		return 0;
	k.dev = dev;
	__builtin_memcpy(k.mac, dmac, ETH_ALEN);
	rd = bpf_map_lookup_elem(&lfp_vxfdb, &k);
	if (!rd)
		return 0;
	fc->vx.dev = *vx;
	fc->vx.fdb = *rd;
	fib_cache_keep_vx(fc);
	return 1;
}

/* Decide whether the IPv4 packet the router sends into vxlan device `dev` (fib: the inner
 * routing result; tot: its IP length, or a GSO segment's; vr: dev's data and remote,
 * vxlan_remote()'s) is encapsulated here. On success the redirect to the underlay is set up
 * and *p holds the outer headers. Any other result: the driver's path. Nothing of the packet
 * is changed. vr is in fc, which the outer route's lookup below rewrites: read before it. */
static __always_inline int vxlan_plan(lfp_ctx *ctx, const struct lfp_config *cfg, __u32 dev,
				      const struct lfp_vx_remote *vr, const struct bpf_fib_lookup *fib,
				      __u8 inner_tos, __u32 tot, __u32 prio, struct vxlan_plan *p,
				      struct ct_pkt *c, struct bpf_fib_lookup *op, struct fib_cache_scr *fc)
{
	/* The outer route's lookup structure is scratch space (op): the stack is short. */
#define o (*op)
	const struct lfp_vxlan_dev *vx = &vr->dev;
	const struct lfp_vxfdb_val *rd = &vr->fdb;
	__u32 hash, lo, hi;
	int rc;

	/* The outer packet is built and sent by this host: only where no rule but nat chains' (which
	 * see a connection's first packet only) could see it on its way out. */
	if (!(cfg->vx_flags & LFP_VX_LOCAL_OUT4))
		return 0;
	/* udp_flow_src_port(): the flow hash of the inner packet (the same skb_get_hash() the
	 * driver would compute on this skb), spread over the port range. A zero hash makes the
	 * driver hash the MACs: its path. */
	hash = ctx_hash_recalc(ctx);
	if (!hash)
		return 0;
	lo = vx->port_min;
	hi = vx->port_max;
	hash ^= hash << 16;
	p->sport = bpf_htons((__u16)((((__u64)hash * (hi - lo)) >> 32) + lo));
	p->dport = rd->port ? rd->port : vx->port;
	p->vni = rd->vni;
	p->saddr = vx->local;
	p->daddr = rd->dst;
	/* The route's mark is the skb's (flowi4_mark); bpf_fib_lookup() looks up with mark 0. */
	if (ctx_mark(ctx))
		return 0;
	/* The checksum state: udp_set_csum() computes a udpcsum device's outer checksum from the
	 * inner one left to offload (lco_csum()) for a single packet; a GSO train or a packet with
	 * a complete inner checksum would make the outer header's checksum offloaded instead,
	 * which no helper can set up: the driver's path. */
	{
		struct ctx_csum cs;

		ctx_csum_state(ctx, &cs);
		p->l4_hash = cs.l4_hash;
		p->udpcsum = vx->udpcsum;
		if (vx->udpcsum) {
			if (ctx_gso_size(ctx) || cs.ip_summed != CTX_CSUM_PARTIAL ||
			    cs.start != ETH_HLEN + sizeof(struct iphdr) || (cs.offset != 6 && cs.offset != 16))
				return 0;
			p->csum_off = cs.start + cs.offset;
		}
	}
	/* tos 1 is "inherit"; then INET_ECN_encapsulate(). */
	p->tos = vxlan_ecn_encap(vx->tos == 1 ? inner_tos : vx->tos, inner_tos);
	/* ip4_dst_hoplimit(): the route's hoplimit metric, else net.ipv4.ip_default_ttl. */
	if (!vx->ttl && (cfg->vx_flags & LFP_VX_HOPLIMIT4))
		return 0;
	p->ttl = vx->ttl ? vx->ttl : cfg->default_ttl;

	/* The outer route, as ip_route_output_key() looks it up: from loopback (flowi4_iif =
	 * LOOPBACK_IFINDEX), no output device (the remote has none), the outer tos, UDP ports;
	 * answered by the FIB cache where it may (fibcache.h says why the same answer holds). */
	__builtin_memset(&o, 0, sizeof(o));
	o.family = AF_INET;
	o.tos = p->tos;
	o.l4_protocol = IPPROTO_UDP;
	o.sport = p->sport;
	o.dport = p->dport;
	o.tot_len = tot + VXLAN_ENCAP;
	o.ifindex = 1;
	o.ipv4_src = p->saddr;
	o.ipv4_dst = p->daddr;
	rc = fib_lookup_cached(ctx, cfg, fc, &o, 1, fib_cache_gen(cfg, 1));
	/* Local (the driver's bypass to another vxlan device here), unreachable, larger than the
	 * underlay MTU (the driver's outer header has DF clear: Linux fragments it) ...: its path. */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || o.ifindex == dev)
		return 0;
	if (cfg->route_mtu4 && tot + VXLAN_ENCAP > cfg->route_mtu4)
		return 0;
	/* Not looked up again where the FIB cache's answer says the next hop is not in the set
	 * (fc->neigh_ok, as for the router's own route). */
	if (!fc->neigh_ok && neigh_stale(cfg, &o))
		return 0;

	/* Conntrack of the outer flow (netfilter tracks this host's own packets too): an
	 * established, untranslated entry, refreshed as Linux would; a new flow takes the driver's
	 * path, which creates the entry. */
	if (cfg->ct_flags & LFP_CT_ACTIVE4) {
		if (!cfg_ct4)
			return 0; /* built without conntrack, being replaced */
		__builtin_memset(c, 0, sizeof(*c));
		c->proto = IPPROTO_UDP;
		c->t.ipv4.saddr = p->saddr;
		c->t.ipv4.daddr = p->daddr;
		c->t.ipv4.sport = p->sport;
		c->t.ipv4.dport = p->dport;
		c->tlen = sizeof(c->t.ipv4);
		if (ct_forward(ctx, cfg, c) != LFP_FORWARDED)
			return 0;
	}
	/* Out of the underlay device through its own transmit path (or into its peer's
	 * namespace), with the priority ip_forward() gave the inner packet. */
	if (gate_egress(o.ifindex) != LFP_FORWARDED ||
	    tx_prepare(ctx, o.ifindex, tot + VXLAN_ENCAP, prio) != LFP_FORWARDED)
		return 0;
	__builtin_memcpy(p->dmac, o.dmac, ETH_ALEN);
	__builtin_memcpy(p->smac, o.smac, ETH_ALEN);
	__builtin_memcpy(p->inner_dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(p->inner_smac, fib->smac, ETH_ALEN);
	return 1;
#undef o
}

/* Encapsulate as planned: the inner frame (MACs and TTL as the router leaves them) behind
 * outer Ethernet, IPv4, UDP and VXLAN headers. Returns the verdict; on failure of the one step
 * that can fail (room for the headers) the packet is still untouched and goes to Linux. */
static __always_inline int vxlan_push(lfp_ctx *ctx, const struct vxlan_plan *p)
{
	struct iphdr ip = {};
	struct {
		struct iphdr ip;
		__be16 sport, dport, len, check;
		__be32 flags, vni;
		__u8 inner_dmac[ETH_ALEN];
		__u8 inner_smac[ETH_ALEN];
		__be16 inner_proto;
	} __attribute__((packed)) h __attribute__((aligned(8)));
	/* h as words, for the copy into the packet (an aligned stack copy: the verifier wants
	 * aligned stack reads). */
	__u64 *hw = (__u64 *)&h;
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *iph;
	__u32 len;

	/* The room after the Ethernet header; the inner L2 header is part of it. The GSO size
	 * stays (the driver keeps the inner segment size: outer segments are 50 bytes longer).
	 * An UNNECESSARY checksum state becomes NONE, PARTIAL stays: iptunnel_handle_offloads(). */
	if (ctx_adjust_room(ctx, VXLAN_ENCAP, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
				BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN)))
		return lfp_pass(ctx, LFP_PASS_ENCAP);
	len = ctx_len(ctx);

	ip.version = 4;
	ip.ihl = 5;
	ip.tos = p->tos;
	ip.tot_len = bpf_htons(len - ETH_HLEN);
	/* Linux's __ip_select_ident() is a hashed per-destination counter no helper exposes; the
	 * ID of a packet with DF clear only has to be unlikely to repeat soon. */
	ip.id = (__u16)bpf_get_prandom_u32();
	ip.ttl = p->ttl;
	ip.protocol = IPPROTO_UDP;
	ip.saddr = p->saddr;
	ip.daddr = p->daddr;
	ip.check = ipv4_csum(&ip);
	__builtin_memset(&h, 0, sizeof(h));
	__builtin_memcpy(&h.ip, &ip, sizeof(ip));
	h.sport = p->sport;
	h.dport = p->dport;
	h.len = bpf_htons(len - ETH_HLEN - sizeof(struct iphdr));
	/* UDP checksum 0 (noudpcsum), or filled in below. */
	h.flags = bpf_htonl(VXLAN_HF_VNI);
	h.vni = bpf_htonl(p->vni << 8);
	__builtin_memcpy(h.inner_dmac, p->inner_dmac, ETH_ALEN);
	__builtin_memcpy(h.inner_smac, p->inner_smac, ETH_ALEN);
	h.inner_proto = bpf_htons(ETH_P_IP);
	/* A CHECKSUM_COMPLETE skb's sum must cover the new headers too: through the helper, with
	 * BPF_F_RECOMPUTE_CSUM (the outer Ethernet header is outside that sum). Any other state:
	 * written in place, as that helper would (ctx_csum_complete), without its call; in 8-byte
	 * words (the stack copy is aligned, the packet's writes need not be). */
	data = ctx_data(ctx);
	data_end = ctx_data_end(ctx);
	if (ctx_csum_complete(ctx) || data + ETH_HLEN + sizeof(h) > data_end) {
		if (ctx_store_bytes(ctx, ETH_HLEN, &h, sizeof(h), BPF_F_RECOMPUTE_CSUM))
			return CTX_DROP; /* cannot happen: the room was just made */
		data = ctx_data(ctx);
		data_end = ctx_data_end(ctx);
	} else {
		__u64 *to = data + ETH_HLEN;

		_Static_assert(sizeof(h) == 6 * 8 + 2, "the outer headers: six words and two bytes");
#pragma unroll
		for (int i = 0; i < 6; i++)
			to[i] = hw[i];
		*(__u16 *)(to + 6) = *(const __u16 *)(hw + 6);
	}
	eth = data;
	iph = data + ETH_HLEN + VXLAN_ENCAP;
	if ((void *)(iph + 1) > data_end)
		return CTX_DROP; /* cannot happen: adjust_room leaves the headers linear */
	__builtin_memcpy(eth->h_dest, p->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->smac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	ipv4_decrease_ttl(iph);
	if (p->udpcsum) {
		/* lco_csum(): the sum of the outer UDP header (checksum 0), the VXLAN header and the
		 * inner headers up to the inner checksum's start, plus the complement of what the
		 * inner field holds; then the pseudo header (udp_v4_check()); 0 is sent as 0xffff.
		 * The 50 bytes summed here in 16-bit words (25 loads and adds, no carry out of 32
		 * bits), which bpf_csum_diff() did in a call: the same one's complement sum. */
		__u8 *udp = data + ETH_HLEN + sizeof(struct iphdr);
		__u16 *inner_check = data + VXLAN_ENCAP + (p->csum_off & 0xff);
		const __u16 *w = (const __u16 *)udp;
		__u32 sum, len = bpf_ntohs(h.len);

		if ((void *)(udp + 50) > data_end || (void *)(inner_check + 1) > data_end)
			return CTX_DROP; /* cannot happen: the inner headers were checked before */
		sum = (__u16)~*inner_check;
#pragma unroll
		for (int i = 0; i < 25; i++)
			sum += w[i];
		sum = csum_add(sum, p->saddr);
		sum = csum_add(sum, p->daddr);
		sum = csum_add(sum, bpf_htons(len));
		sum = csum_add(sum, bpf_htons(IPPROTO_UDP));
		*(__u16 *)(udp + 6) = csum_fold(sum) ? csum_fold(sum) : 0xffff;
	}
	/* iptunnel_xmit(): a hash not computed from the L4 flow is cleared. */
	if (!p->l4_hash)
		ctx_clear_hash(ctx);
	lfp_count(ctx, LFP_ENCAPSULATED);
	return CTX_REDIRECT;
}

/* vxlan devices the fast path decapsulates for, by (port, VNI). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_vxlan_rx_key);
	__type(value, struct lfp_vxlan_rx);
	__uint(max_entries, 256);
} lfp_vxlan_rx_map SEC(".maps");

#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)
#endif

/* Where the inner frame goes once decapsulated. Handed to the device's receive path
 * (bpf_redirect(BPF_F_INGRESS): ____dev_forward_skb(), eth_type_trans(), a backlog queue and a
 * second receive round), where the device's own tc program routes it; or, with this setting,
 * routed by this program at once, as that program would route it (linuxfp.c,
 * linuxfp_decap_route). The controller sets it only where the device's graph is one this
 * program can stand in for (internal/graph, vxlanRxRoute: the device runs linuxfp's tc program
 * routing IPv4 and nothing else is on its receive path), and the inline route hands to the
 * device's receive path, as before, every packet it would not forward itself. */
LFP_SETTING(__u32, vxlan_rx_route, 0, "a frame decapsulated here is routed by this program as its vxlan device's program would route it");

/* The verdict that asks the entry point for that route (tc verdicts are small: never this). */
#define LFP_VX_ROUTE 0x10000000

/* A decapsulated packet whose skb Linux's own decapsulation would leave otherwise (vxlan_rx:
 * PARTIAL with the tunnel's offloads set up), kept so that it can be handed to Linux as it
 * came: its first 64 bytes (outer Ethernet, IPv4, UDP and VXLAN headers, inner Ethernet
 * header), its priority, and whether its hash is an L4 one. */
struct vxlan_undo {
	__u8 head[ETH_HLEN + VXLAN_ENCAP];
	__u32 priority;
	__u32 l4_hash;
	__u32 on;
};

static __always_inline int vxlan_rx_deliver(lfp_ctx *ctx, __u32 dev)
{
	if (CTX_TUNNEL && cfg_vxlan_rx_route && dev < LFP_VX_ROUTE)
		return LFP_VX_ROUTE | dev;
	return ctx_redirect_ingress(ctx, dev);
}

/* The FIB cache's family for the keys of lfp_vxlan_rx_map's entries (vxlan_rx_dev), which no
 * route's key has (AF_INET, AF_INET6). */
#define LFP_FIB_VXLAN_RX 0xfe

/* The vxlan device of this host for UDP port `port` and VNI vni (lfp_vxlan_rx_map), into *out:
 * kept by the FIB cache under a key of its own (device: 0, flow: the port, destination: the
 * VNI, family LFP_FIB_VXLAN_RX; the answer's device, next hop and source MAC: the device, its
 * local address and its MAC), else read from the map and kept there. The cache's generation
 * gen, read before the map, keeps the copy only while the map holds it, as for the remotes kept
 * with routes (fib_cache_keep_vx() says why): one hash map call per decapsulated packet
 * otherwise. 0: none. */
static __always_inline int vxlan_rx_dev(struct fib_cache_scr *fc, __u64 gen, __be16 port, __u32 vni, struct lfp_vxlan_rx *out)
{
	struct lfp_fib_key *k;
	struct lfp_vxlan_rx_key rk = {};
	const struct lfp_vxlan_rx *rx;

	k = &fc->key;
	if (gen) {
		const struct lfp_fib_entry *e;

		__builtin_memset(k, 0, sizeof(*k));
		k->family = LFP_FIB_VXLAN_RX;
		k->one = 1;
		k->flow = port;
		k->dst[0] = vni;
		e = fib_cache_find(fc, k, 1, gen);
		if (e) {
			out->dev = e->ifindex;
			out->local = e->nh0;
			__builtin_memcpy(out->mac, e->smac, ETH_ALEN);
			return 1;
		}
	}
	rk.port = port;
	rk.vni = vni;
	rx = bpf_map_lookup_elem(&lfp_vxlan_rx_map, &rk);
	if (!rx)
		return 0;
	out->dev = rx->dev;
	out->local = rx->local;
	__builtin_memcpy(out->mac, rx->mac, ETH_ALEN);
	if (gen) {
		struct lfp_fib_entry *e = &fc->entry;

		__builtin_memset(e, 0, sizeof(*e));
		e->gen = gen;
		e->ifindex = rx->dev;
		e->nh0 = rx->local;
		__builtin_memcpy(e->smac, rx->mac, ETH_ALEN);
		fib_cache_put(fc, k, e, 1);
	}
	return 1;
}

/* A UDP packet to this host: if it is VXLAN for a device the fast path decapsulates for, do what
 * udp_rcv() and vxlan_rcv() would (strip the outer headers) and hand the inner frame on
 * (vxlan_rx_deliver). Returns 1 with *verdict set, or 0 when it is not such a packet (the router goes on).
 * Called after the conntrack step, which took the outer flow's entry as Linux's input path
 * would; iph is a whole, valid, unfragmented IPv4 header of length tot. fc, gen: the FIB
 * cache's scratch and IPv4 generation (vxlan_rx_dev); rx: scratch space for the device. */
static __always_inline int vxlan_rx(lfp_ctx *ctx, const struct lfp_config *cfg, struct iphdr *iph,
				    void *data_end, __u32 tot, struct fib_cache_scr *fc, __u64 gen,
				    struct lfp_vxlan_rx *rx, struct vxlan_undo *undo, const struct gate_ref *gate,
				    int *verdict)
{
	struct {
		__be16 sport, dport, len, check;
		__be32 flags, vni;
	} *h = (void *)(iph + 1);
	struct ethhdr *ie = (void *)(h + 1); /* the inner frame's */
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	struct ctx_csum cs;
	struct ethhdr inner;
	__u32 l4len = tot - sizeof(*iph);
	int own;

	if ((void *)(h + 1) > data_end)
		return 0;
	if (!vxlan_rx_dev(fc, gen, h->dport, bpf_ntohl(h->vni) >> 8, rx) || iph->daddr != rx->local)
		return 0;
	/* From here on it is VXLAN for a device of this host: what the fast path does not do exactly
	 * goes to Linux. Only an skb can be decapsulated (ctx.h). */
	if (!CTX_TUNNEL)
		goto linux;
	/* vxlan_rcv() acts on the device's configuration (up, learning, its address and port ...):
	 * while a change of the device waits for the controller (the link fence), the packet is
	 * Linux's, as the device's own program would hand it over (gate_check()). */
	if (gate_egress_in(gate, rx->dev) != LFP_FORWARDED) {
		*verdict = lfp_pass(ctx, LFP_PASS_FENCED);
		return 1;
	}
	/* Too short for an inner Ethernet header: not taken for VXLAN here (the router goes on, and
	 * the local route hands it to Linux). */
	if ((void *)(ie + 1) > data_end)
		return 0;
	/* Not through rules on the local input path (other than nat chains'). */
	if (!(cfg->vx_flags & LFP_VX_LOCAL_IN4))
		goto linux;
	/* A GSO train (GRO merged VXLAN packets), a UDP checksum to verify, a length that is not
	 * the IP one, a header with other flags or reserved bits (vxlan_rcv() drops it or handles
	 * GBP/GPE/RCO), an outer ECN codepoint (vxlan_ecn_decapsulate() may log, drop, or set CE on
	 * the inner packet), an inner frame from the device itself (a loop: dropped), a checksum
	 * state Linux's UDP layer would adjust, IP options or fragments inside: Linux. */
	if (ctx_gso_size(ctx) || bpf_ntohs(h->len) != l4len || l4len < 8 + VXLAN_HLEN + ETH_HLEN ||
	    h->flags != bpf_htonl(VXLAN_HF_VNI) || (h->vni & bpf_htonl(0xff)) || (iph->tos & INET_ECN_MASK) ||
	    mac_equal_w(ie->h_source, rx->mac))
		goto linux;
	/* udp4_csum_init(): a zero checksum, or one the skb's state says is verified (UNNECESSARY)
	 * or will be completed by whoever fills the inner one (PARTIAL, as from a local sender), is
	 * accepted without looking; any other is verified over the whole packet: Linux's. */
	ctx_csum_state(ctx, &cs);
	if (h->check && cs.ip_summed != CTX_CSUM_UNNECESSARY &&
	    !(cs.ip_summed == CTX_CSUM_PARTIAL && cs.start >= (__s32)(ETH_HLEN + sizeof(*iph))))
		goto linux;
	/* An inner checksum left to offload (PARTIAL) in a packet whose tunnel offloads are set up
	 * (skb->encapsulation: as the sender's vxlan driver, or this fast path, leaves it):
	 * vxlan_rcv() clears the flag (iptunnel_pull_offloads()), the helper's decapsulation cannot.
	 * Left set, a device the inner packet then leaves by without checksum offload for tunnels
	 * (a bridge: cni0) completes the checksum (validate_xmit_skb()) where Linux's would leave it
	 * to be completed: not the same packet whenever Linux forwards what was decapsulated here.
	 * So such a packet is decapsulated only where the underlay's program routes it on
	 * (cfg_vxlan_rx_route), which puts it back as it came wherever it hands it to Linux
	 * (vxlan_undo); a packet handed to the device's receive path would be Linux's to forward. */
	if (cs.ip_summed == CTX_CSUM_PARTIAL && cs.encap && !(CTX_TUNNEL && cfg_vxlan_rx_route))
		goto linux;
	undo->on = cs.ip_summed == CTX_CSUM_PARTIAL && cs.encap;
	if (undo->on) {
		__builtin_memcpy(undo->head, (void *)iph - ETH_HLEN, sizeof(undo->head));
		undo->priority = ctx_priority(ctx);
		undo->l4_hash = cs.l4_hash;
	}
	/* udp_rcv() delivers to the socket bound most specifically: the vxlan device's socket is
	 * bound to the port on any address; another socket on this very address would get it. */
	t.ipv4.saddr = iph->saddr;
	t.ipv4.daddr = iph->daddr;
	t.ipv4.sport = h->sport;
	t.ipv4.dport = h->dport;
	sk = bpf_sk_lookup_udp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		goto linux;
	own = sk->src_ip4 == 0;
	bpf_sk_release(sk);
	if (!own)
		goto linux;
	/* Only IPv4 inside (an inner IPv6 packet would change the skb's protocol). */
	if (ie->h_proto != bpf_htons(ETH_P_IP))
		goto linux;
	__builtin_memcpy(&inner, ie, sizeof(inner));

	/* Strip outer IPv4, UDP, VXLAN and the inner Ethernet header's room; the outer Ethernet
	 * header's place takes the inner one. A CHECKSUM_COMPLETE sum is adjusted by the helper. */
	if (ctx_adjust_room(ctx, -(__s32)VXLAN_ENCAP, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_DECAP_L3_IPV4 | BPF_F_ADJ_ROOM_NO_CSUM_RESET))
		goto linux;
	/* The outer UDP checksum counted as verified: one level of UNNECESSARY is used up
	 * (__skb_decr_checksum_unnecessary()); iptunnel_pull_header() clears a non-L4 hash. */
	if (cs.ip_summed == CTX_CSUM_UNNECESSARY)
		ctx_csum_level_dec(ctx);
	if (!cs.l4_hash && !undo->on)
		ctx_clear_hash(ctx);
	/* The inner Ethernet header in the outer one's place: outside any checksum state's sum, so
	 * written in place where it is linear (it is, after the shrink), through the helper else. */
	{
		struct ethhdr *to = ctx_data(ctx);

		if ((void *)(to + 1) <= ctx_data_end(ctx))
			__builtin_memcpy(to, &inner, sizeof(inner));
		else if (ctx_store_bytes(ctx, 0, &inner, sizeof(inner), 0))
			own = 0; /* cannot happen: the room was just shrunk */
	}
	if (!own)
		*verdict = CTX_DROP;
	else {
		/* Counted once the route has taken it, where it may still be undone. */
		if (!undo->on)
			lfp_count(ctx, LFP_DECAPSULATED);
		*verdict = vxlan_rx_deliver(ctx, rx->dev);
	}
	return 1;
linux:
	*verdict = lfp_pass(ctx, LFP_PASS_VXLAN);
	return 1;
}

#endif
