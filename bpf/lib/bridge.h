/* Bridge module: frames received on a bridge port, handled as br_handle_frame() and
 * br_handle_frame_finish() would: known unicast is sent to its port (br_forward), frames to the
 * bridge's own MAC continue into the router module as if received by the bridge device
 * (bridge -> router), and everything Linux does more with (learning, flooding, STP, netfilter
 * ...) goes to Linux untouched, with its reason. */
#ifndef LFP_BRIDGE_H
#define LFP_BRIDGE_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"
#include "stats.h"
#include "iface.h"
#include "state.h"
#include "fdb.h"
#include "filter.h"
#include "ct.h"
#include "nat.h"
#include "tx.h"
#include "gate.h"

/* cfg_bridge (iface.h): the interface is a bridge port; the bridge's ifindex is its lfp_if's
 * l3_ifindex, the bridge's MAC in the port's lfp_l2 entry. */

/* br_validate_ipv4() / br_validate_ipv6(): with bridge-nf-call-iptables (or -ip6tables) on, a
 * bridged IP packet is checked (and dropped if bad) and trimmed to its IP length before the
 * iptables hooks, even when they hold no rule. Returns the L3 length the frame leaves with, or
 * 0 when Linux must see the packet (it would drop it, or we do not model it). */
static __always_inline __u32 bridge_nf_l3len(const lfp_ctx *ctx, __u16 proto, __u32 flags)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	__u32 l3len = ctx_len(ctx) - sizeof(struct ethhdr);

	if (proto == bpf_htons(ETH_P_IP) && (flags & LFP_L2_NF4)) {
		struct iphdr *iph = data + sizeof(struct ethhdr);
		__u32 tot;

		if ((void *)(iph + 1) > data_end)
			return 0;
		/* Options: Linux checks them (ip_options_compile) on some paths: not modelled. */
		if (iph->version != 4 || iph->ihl != 5 || ipv4_csum_bad(iph))
			return 0;
		tot = bpf_ntohs(iph->tot_len);
		if (tot < sizeof(*iph) || tot > l3len)
			return 0;
		return tot;
	}
	if (proto == bpf_htons(ETH_P_IPV6) && (flags & LFP_L2_NF6)) {
		struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
		__u32 tot;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		/* Hop-by-hop options: br_nf_check_hbh_len() parses them (jumbograms). */
		if (ip6->version != 6 || ip6->nexthdr == NEXTHDR_HOP)
			return 0;
		tot = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
		if (tot > l3len)
			return 0;
		return tot;
	}
	return l3len;
}

/* What br_netfilter's IP hooks need to know of a bridged packet (bridge_nf_ip). */
struct bridge_nf {
	const struct lfp_config *cfg;
	struct lfp_scratch *scr;
	int fw, ct;
};

/* br_netfilter with rules or connection tracking: a bridged IPv4/IPv6 packet traverses the IP
 * prerouting, forward and postrouting hooks with the bridge device as input and output
 * (brnf_get_logical_dev()). This is the prerouting part, before the FDB decides the port: the
 * conntrack step (bpf/lib/ct.h), and the filter's view of the packet for the forward part
 * (bridge_nf_classify). LFP_FORWARDED: go on. */
static __always_inline enum lfp_reason bridge_nf_ip(lfp_ctx *ctx, __u16 proto, struct bridge_nf *nf)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	int v6 = proto == bpf_htons(ETH_P_IPV6);
	struct fw_pkt *fp;
	enum lfp_reason r;
	__u32 tot, l3hdr;
	__u8 l4proto;
	void *l4;

	nf->cfg = lfp_config();
	if (!nf->cfg)
		return LFP_PASS_FIB_OTHER;
	nf->ct = nf->cfg->ct_flags & (v6 ? LFP_CT_ACTIVE6 : LFP_CT_ACTIVE4);
	/* Built without the conntrack module (ct.h: cfg_ct4/cfg_ct6), being replaced. */
	if (nf->ct && !(v6 ? cfg_ct6 : cfg_ct4))
		return LFP_PASS_RELOADING;
	nf->fw = nf->cfg->fw_flags & (v6 ? LFP_FW_ACTIVE6 : LFP_FW_ACTIVE4);
	if (!nf->ct && !nf->fw)
		return LFP_FORWARDED;
	nf->scr = lfp_scratch();
	if (!nf->scr)
		return LFP_PASS_FIB_OTHER;
	fp = &nf->scr->fp;
	/* bridge_nf_l3len() validated the header. */
	__builtin_memset(fp, 0, sizeof(*fp));
	fp->v6 = v6;
	if (v6) {
		struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);

		if ((void *)(ip6 + 1) > data_end)
			return LFP_PASS_MALFORMED;
		__builtin_memcpy(fp->src, &ip6->saddr, 16);
		__builtin_memcpy(fp->dst, &ip6->daddr, 16);
		l4proto = ip6->nexthdr;
		l4 = ip6 + 1;
		l3hdr = sizeof(*ip6);
		tot = l3hdr + bpf_ntohs(ip6->payload_len);
	} else {
		struct iphdr *iph = data + sizeof(struct ethhdr);

		if ((void *)(iph + 1) > data_end)
			return LFP_PASS_MALFORMED;
		/* Conntrack reassembles fragments (nf_defrag) and the rules' port matches do not
		 * see a fragment's ports: Linux's. */
		if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return LFP_PASS_FRAGMENT;
		fp->src[0] = iph->saddr;
		fp->dst[0] = iph->daddr;
		l4proto = iph->protocol;
		l4 = iph + 1;
		l3hdr = sizeof(*iph);
		tot = bpf_ntohs(iph->tot_len);
	}
	nf->scr->ct.refresh = 0;
	nf->scr->ct.nat = 0;
	if ((v6 ? cfg_ct6 : cfg_ct4) && nf->ct) {
		struct ct_pkt *c = &nf->scr->ct;

		/* A translated connection's bridged packets, IPv4 and IPv6 alike (br_netfilter runs
		 * nf_nat in both families' hooks): those whose destination stays are translated here,
		 * after the rules (the source is postrouting's manip: the reply of a DNAT'd
		 * connection, from a pod to a pod on the same bridge through a service address), and
		 * leave with their MACs and TTL or hop limit as they came. A new destination address
		 * makes br_netfilter route the packet again (br_nf_pre_routing_finish(),
		 * br_nf_pre_routing_finish_ipv6()), and a new destination port would have the forward
		 * rules see another port than the one classified here (filter_l4 reads the packet's):
		 * Linux's. */
		r = ct_prerouting(ctx, nf->cfg, c, fp->src, fp->dst, v6, l4proto, l4, data_end, tot - l3hdr,
				  nf->scr->buf, 1);
		if (r == LFP_FORWARDED && c->nat && (nat_daddr_moved(c) || nat_dport_moved(c)))
			r = LFP_PASS_CT_NAT;
		if (r != LFP_FORWARDED)
			return r;
		fp->ctstate = c->state;
	}
	if (nf->fw)
		return filter_l4(fp, l4proto, l4, data_end, tot - l3hdr, tot);
	return LFP_FORWARDED;
}

/* A frame to the bridge's own MAC, which the router takes as received by the bridge device
 * (bridge -> router). */
struct bridge_up {
	int route; /* the router takes the frame */
	__be16 proto;
};

/* A frame received on bridge port in (its data: iface; gate: the gate's maps, looked up by the
 * entry point): bridged, dropped or Linux's (the verdict), or for the router (up->route, with
 * the rest of *up filled). */
static __always_inline int bridge_rx(lfp_ctx *ctx, const struct lfp_if *iface, const struct gate_ref *gate, __u32 in,
				     struct bridge_up *up)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	__u32 bridge = iface->l3_ifindex, out = 0, l3len;
	struct fdb_ent src, dst;
	struct ethhdr *eth = data;
	struct lfp_l2_dev *port;
	struct bridge_nf nf = {};
	enum lfp_reason r;
	__u16 proto;
	int nf_ip, dst_found;

	up->route = 0;
	if ((void *)(eth + 1) > data_end)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	port = l2_dev(in);
	/* Not mirrored yet (the port just joined), or mirrored into another bridge. */
	if (!port || port->bridge != bridge || (port->flags & LFP_L2_BRIDGE))
		return lfp_pass(ctx, LFP_PASS_BR_CONFIG);
	/* Listening, learning, blocking, disabled: STP is Linux's (BPDUs are link-local multicast). */
	if (!(port->flags & LFP_L2_FORWARDING))
		return lfp_pass(ctx, LFP_PASS_BR_PORT_STATE);
	/* vlan_filtering, locked/MAB ports, a promiscuous bridge device, bridge-family nftables ...:
	 * the controller clears IN_OK and `linuxfp status` says which. */
	if (!(port->flags & LFP_L2_IN_OK))
		return lfp_pass(ctx, LFP_PASS_BR_CONFIG);
	/* Broadcast, multicast, the reserved 01:80:c2:00:00:0X group (STP, LLDP, 802.1X): flooded,
	 * snooped, trapped or delivered by Linux. */
	if (eth->h_dest[0] & 1)
		return lfp_pass(ctx, LFP_PASS_BR_FLOOD);
	/* br_handle_frame() drops frames with a multicast or all-zero source. */
	if ((eth->h_source[0] & 1) || !(eth->h_source[0] | eth->h_source[1] | eth->h_source[2] |
					eth->h_source[3] | eth->h_source[4] | eth->h_source[5]))
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	/* Only IPv4 and IPv6: ARP (proxy ARP, neighbour suppression, arptables), VLAN and PPPoE tags
	 * (br_netfilter's filter-vlan-tagged / filter-pppoe-tagged) and the rest are Linux's. */
	proto = eth->h_proto;
	if (proto != bpf_htons(ETH_P_IP) && proto != bpf_htons(ETH_P_IPV6))
		return lfp_pass(ctx, LFP_PASS_NOT_IP);

	/* br_fdb_update() learns the source first: unknown here, on another port (a move), or one of
	 * the bridge's own addresses (Linux warns) are Linux's to handle. */
	if (!fdb_get(bridge, eth->h_source, &src, (port->flags & LFP_L2_LEARNING) ? in : 0) || src.port != in ||
	    (src.flags & LFP_FDB_LOCAL))
		return lfp_pass(ctx, LFP_PASS_BR_SRC_UNKNOWN);
	/* Learning keeps the entry alive in Linux: one frame per interval is Linux's (fdb.h). */
	if (src.refresh)
		return lfp_pass(ctx, LFP_PASS_BR_REFRESH);

	dst_found = fdb_get(bridge, eth->h_dest, &dst, 0);
	if (dst_found && (dst.flags & LFP_FDB_LOCAL)) {
		/* br_pass_frame_up(): only frames to the bridge device's own MAC become PACKET_HOST
		 * there; other local entries (ports' addresses, `bridge fdb add ... permanent`) are
		 * delivered as PACKET_OTHERHOST or HOST depending on the port: Linux's. */
		if (!mac_equal_w(eth->h_dest, port->br_mac))
			return lfp_pass(ctx, LFP_PASS_BR_LOCAL);
		/* The bridge device's options decide this too (its MAC, vlan_filtering ...). */
		r = gate_egress_in(gate, bridge);
		if (r != LFP_FORWARDED)
			return lfp_pass(ctx, r);
		up->route = 1;
		up->proto = proto;
		return CTX_PASS;
	}

	/* Bridged IP and br_netfilter: with rules the filter module does not take over, Linux's;
	 * otherwise validated and trimmed as br_validate_ipv4/6() do, then through the IP hooks
	 * (bridge_nf_ip). */
	if (proto == bpf_htons(ETH_P_IP) && (port->flags & LFP_L2_IP4_OFF))
		return lfp_pass(ctx, LFP_PASS_BR_NETFILTER);
	if (proto == bpf_htons(ETH_P_IPV6) && (port->flags & LFP_L2_IP6_OFF))
		return lfp_pass(ctx, LFP_PASS_BR_NETFILTER);
	l3len = bridge_nf_l3len(ctx, proto, port->flags);
	if (!l3len)
		return lfp_pass(ctx, LFP_PASS_BR_NETFILTER);
	nf_ip = port->flags & (proto == bpf_htons(ETH_P_IP) ? LFP_L2_NF4 : LFP_L2_NF6);
	if (nf_ip) {
		r = bridge_nf_ip(ctx, proto, &nf);
		if (r != LFP_FORWARDED)
			return lfp_pass(ctx, r);
	}

	/* br_dev_queue_push_xmit() lets every GSO train through (is_skb_forwardable()). */
	r = bridge_out(bridge, dst_found ? &dst : NULL, in, port->flags, ctx_gso_size(ctx) ? 0 : l3len, &out);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	/* br_netfilter's forward hook (br_nf_forward_ip()), then its postrouting: the filter module,
	 * with the bridge as input and output device. */
	if (nf_ip && nf.fw && nf.scr) {
		r = filter_forward(ctx, nf.cfg, &nf.scr->fp, &nf.scr->ct, iface, bridge, bridge);
		if (r == LFP_FILTER_DROPPED)
			return lfp_drop(ctx, r);
		if (r != LFP_FORWARDED)
			return lfp_pass(ctx, r);
	}
	r = gate_egress_in(gate, out);
	if (r == LFP_FORWARDED)
		r = tx_prepare(ctx, out, l3len, TX_PRIO_KEEP);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	/* Now surely ours: trim the Ethernet padding br_validate_ipv4/6() would have trimmed. */
	if (l3len < ctx_len(ctx) - sizeof(struct ethhdr) &&
	    ctx_trim(ctx, ctx_len(ctx) - sizeof(struct ethhdr) - l3len))
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	/* The redirect is set up: a rewrite that fails (none for a linear header) cannot hand the
	 * packet to Linux half rewritten. */
	if (nf_ip && nf.scr && nf.scr->ct.nat) {
		int err = 0;

		if (!nf.scr->ct.v6) {
			if (cfg_ct4)
				err = nat_rewrite4(ctx, &nf.scr->ct);
		} else if (cfg_ct6) {
			err = nat_rewrite6(ctx, &nf.scr->ct);
		}
		if (err)
			return CTX_DROP;
	}
	lfp_count_in(ctx, iface, LFP_BRIDGED);
	return CTX_REDIRECT;
}

#endif
