/* Bridge module: frames received on a bridge port, handled as br_handle_frame() and
 * br_handle_frame_finish() would: known unicast is sent to its port (br_forward), frames to the
 * bridge's own MAC continue into the router module as if received by the bridge device
 * (bridge -> router), and everything Linux does more with (learning, flooding, STP, netfilter
 * ...) goes to Linux untouched, with its reason. */
#ifndef LFP_BRIDGE_H
#define LFP_BRIDGE_H

#include "ctx.h"
#include "parse.h"
#include "stats.h"
#include "fdb.h"
#include "router.h"

/* Frozen per interface: this interface is a bridge port (its program runs this module). The
 * bridge's ifindex is cfg_l3_ifindex; its MAC is in the port's lfp_l2 entry. */
volatile const __u32 cfg_bridge = 0;

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

static __always_inline int bridge_rx(lfp_ctx *ctx)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	__u32 in = ctx_ingress_ifindex(ctx), bridge = cfg_l3_ifindex, out = 0, l3len;
	struct lfp_fdb_val *src, *dst;
	struct ethhdr *eth = data;
	struct lfp_l2_dev *port;
	__u8 smac[ETH_ALEN];
	enum lfp_reason r;
	__u16 proto;
	int act;

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
	src = fdb_lookup(bridge, eth->h_source);
	if (!src || src->port != in || (src->flags & LFP_FDB_LOCAL))
		return lfp_pass(ctx, LFP_PASS_BR_SRC_UNKNOWN);
	__builtin_memcpy(smac, eth->h_source, ETH_ALEN);

	dst = fdb_lookup(bridge, eth->h_dest);
	if (dst && (dst->flags & LFP_FDB_LOCAL)) {
		/* br_pass_frame_up(): only frames to the bridge device's own MAC become PACKET_HOST
		 * there; other local entries (ports' addresses, `bridge fdb add ... permanent`) are
		 * delivered as PACKET_OTHERHOST or HOST depending on the port: Linux's. */
		if (!mac_equal(eth->h_dest, port->br_mac))
			return lfp_pass(ctx, LFP_PASS_BR_LOCAL);
		switch (proto) {
		case bpf_htons(ETH_P_IP):
			act = router_ipv4(ctx);
			break;
		default:
			act = router_ipv6(ctx);
			break;
		}
		if (act == CTX_REDIRECT && (port->flags & LFP_L2_LEARNING))
			bridge_refresh(src, bridge, in, smac);
		return act;
	}

	/* Bridged IP and br_netfilter: with rules that could see the packet, Linux's; without,
	 * still validated and trimmed as br_validate_ipv4/6() do. */
	if (proto == bpf_htons(ETH_P_IP) && (port->flags & LFP_L2_IP4_OFF))
		return lfp_pass(ctx, LFP_PASS_BR_NETFILTER);
	if (proto == bpf_htons(ETH_P_IPV6) && (port->flags & LFP_L2_IP6_OFF))
		return lfp_pass(ctx, LFP_PASS_BR_NETFILTER);
	l3len = bridge_nf_l3len(ctx, proto, port->flags);
	if (!l3len)
		return lfp_pass(ctx, LFP_PASS_BR_NETFILTER);

	/* br_dev_queue_push_xmit() lets every GSO train through (is_skb_forwardable()). */
	r = bridge_out_port(bridge, eth->h_dest, in, port->flags, ctx_gso_size(ctx) ? 0 : l3len, &out);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	r = tx_prepare(ctx, out, l3len, TX_PRIO_KEEP);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	/* Now surely ours: trim the Ethernet padding br_validate_ipv4/6() would have trimmed. */
	if (l3len < ctx_len(ctx) - sizeof(struct ethhdr) &&
	    ctx_trim(ctx, ctx_len(ctx) - sizeof(struct ethhdr) - l3len))
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	if (port->flags & LFP_L2_LEARNING)
		bridge_refresh(src, bridge, in, smac);
	lfp_count(ctx, LFP_BRIDGED);
	return CTX_REDIRECT;
}

#endif
