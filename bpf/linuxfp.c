/* linuxfp data plane entry point: one program per kind of interface, specialised by the frozen
 * .rodata constants of the modules it includes (the verifier removes what the interface does not
 * use); what differs between interfaces of a kind (MAC, counters, bridge) is data (lib/iface.h).
 * Compiled twice from this source: for XDP, and with -DLFP_HOOK_TC for tc (tcx) ingress. The
 * modules are composed here, in the order Linux applies them (linuxfp_rx, linuxfp_route). */
#include "lib/ctx.h"
#include "lib/parse.h"
#include "lib/stats.h"
#include "lib/iface.h"
#include "lib/gate.h"
#include "lib/state.h"
#include "lib/ct.h"
#include "lib/filter.h"
#include "lib/router.h"
#include "lib/bridge.h"

char LICENSE[] SEC("license") = "GPL";

/* Headers the modules read through direct packet access (TC: an skb may hold less than that in
 * its linear part): Ethernet, then IPv4 and the most of an L4 header any module reads (a VXLAN
 * packet's UDP and VXLAN headers and inner Ethernet header, 8 + 8 + 14 bytes; of TCP, the
 * first 20), or IPv6 and a TCP header. No more: a small segment's linear part ends with its
 * headers (a TCP sender's 1-byte request: 66 bytes with timestamps, its payload in a page), and a
 * pull beyond them copies the head of every such segment (a clone the sender keeps for
 * retransmission) only to read bytes no module looks at. */
#define LFP_PULL_LEN4 (14 + 20 + 30)
#define LFP_PULL_LEN (14 + 40 + 20)

/* A step's reason as the program's verdict: dropped as Linux would, or Linux's. */
static __always_inline int linuxfp_verdict(lfp_ctx *ctx, enum lfp_reason r)
{
	if (r == LFP_FILTER_DROPPED)
		return lfp_drop(ctx, r);
	return lfp_pass(ctx, r);
}

/* An inner packet the underlay's program decapsulated and does not forward (linuxfp_decap_route):
 * to the vxlan device's receive path, where its own program decides it; or, where Linux's own
 * decapsulation would have left its skb otherwise (vxlan.h, vxlan_undo), back to the VXLAN
 * packet it came as, for Linux's receive path on the underlay. */
static __always_inline int linuxfp_decap_handoff(lfp_ctx *ctx, __u32 dev)
{
#if LFP_TC
	struct lfp_scratch *scr = lfp_scratch();
	struct vxlan_undo *u;

	if (!scr || !scr->vxu.on)
		return ctx_redirect_ingress(ctx, dev);
	u = &scr->vxu;
	u->on = 0;
	/* The 50 bytes the decapsulation took out, back after the (inner) Ethernet header, then
	 * the 64 bytes as they came over both. An inner checksum left to offload is summed from
	 * its own start on: nothing before it is in any sum. Neither step fails short of memory;
	 * where one does, the decapsulated packet goes to the device, as where nothing was kept,
	 * with the room taken out again if the bytes could not be written into it (should that
	 * fail too, the packet holds 50 bytes nobody wrote, and is dropped). */
	if (ctx_adjust_room(ctx, VXLAN_ENCAP, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_NO_CSUM_RESET))
		goto decapsulated;
	if (ctx_store_bytes(ctx, 0, u->head, sizeof(u->head), 0)) {
		if (ctx_adjust_room(ctx, -(__s32)VXLAN_ENCAP, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_NO_CSUM_RESET))
			return CTX_DROP;
		goto decapsulated;
	}
	ctx_set_priority(ctx, u->priority);
	return lfp_pass(ctx, LFP_PASS_VXLAN);
decapsulated:
	lfp_count(ctx, LFP_DECAPSULATED);
	return ctx_redirect_ingress(ctx, dev);
#else
	return ctx_redirect_ingress(ctx, dev);
#endif
}

/* A step's reason as the routed path's verdict: for a packet the underlay's program routes as
 * a vxlan device would (inner, linuxfp_decap_route), whatever that device's program would not
 * forward is handed to the device's receive path, where that program decides it, as before. */
static __always_inline int linuxfp_route_verdict(lfp_ctx *ctx, enum lfp_reason r, __u32 in, const int inner)
{
	if (inner)
		return linuxfp_decap_handoff(ctx, in);
	return linuxfp_verdict(ctx, r);
}

/* The routed path, in Linux's order: the family's input checks, conntrack (prerouting), VXLAN
 * for this host, the filter's view of the packet and prerouting's translation, the routing
 * decision, the forward and postrouting rules, the checks on the way out, and the rewrite. Each
 * step goes on (LFP_FORWARDED) or says why not. v4 and inner are constants: each family, and
 * the inner packets of the VXLAN module, get their own inlined copy. */
static __always_inline int linuxfp_route(lfp_ctx *ctx, const struct lfp_if *iface, const struct gate_ref *gate,
					 __u32 in, const int v4, const int inner)
{
	struct bpf_fib_lookup fib;
	struct router_pkt p = { .fib = &fib, .iface = iface, .gate = *gate, .in_ifindex = in, .v4 = v4, .inner = inner };
	enum lfp_reason r;
	int v;

	if (cfg_bridge && !inner && iface->l3_ifindex)
		p.in_ifindex = iface->l3_ifindex;
	r = v4 ? router_ipv4(ctx, &p) : router_ipv6(ctx, &p);
	if (r == LFP_FORWARDED)
		r = router_prepare(ctx, &p);
	if (r == LFP_FORWARDED)
		r = router_conntrack(ctx, &p);
	if (r != LFP_FORWARDED)
		return linuxfp_route_verdict(ctx, r, in, inner);
	/* Inside an inner packet: the device's program decapsulates it (the route below finds the
	 * address local and hands it there). */
	if (!inner && router_vxlan_rx(ctx, &p, &v))
		return v;
	if (p.fw) {
		r = filter_l4(&p.scr->fp, p.proto, p.l4, p.data_end, p.l4len, p.tot);
		if (r != LFP_FORWARDED)
			return linuxfp_route_verdict(ctx, r, in, inner);
	}
	r = router_dnat(&p);
	if (r == LFP_FORWARDED)
		r = router_fib(ctx, &p);
	/* The device the packet is routed to (a VXLAN or bridge device too, whose own way out is
	 * checked again where it is chosen): a change of it not followed yet (gate.h). */
	if (r == LFP_FORWARDED)
		r = gate_egress_in(&p.gate, fib.ifindex);
	/* The filter once the output interface is known (filter.h); before the egress checks: a
	 * packet netfilter drops never reaches Linux's neighbour layer or qdisc. */
	if (r == LFP_FORWARDED && p.fw)
		r = filter_forward(ctx, p.cfg, &p.scr->fp, &p.scr->ct, iface, p.in_ifindex, fib.ifindex);
	if (r == LFP_FORWARDED)
		r = router_egress(ctx, &p);
	if (r != LFP_FORWARDED)
		return linuxfp_route_verdict(ctx, r, in, inner);
	return router_xmit(ctx, &p);
}

/* iface: the ingress interface's data, in its ifindex; gate: the gate's maps. */
static __always_inline int linuxfp_router(lfp_ctx *ctx, const struct lfp_if *iface, const struct gate_ref *gate,
					  __u32 in, __be16 proto)
{
	switch (proto) {
	case bpf_htons(ETH_P_IP):
		return linuxfp_route(ctx, iface, gate, in, 1, 0);
	case bpf_htons(ETH_P_IPV6):
		return linuxfp_route(ctx, iface, gate, in, 0, 0);
	}
	/* ARP, VLAN tags (802.1Q is not even built here), LLDP ...: Linux's. */
	return lfp_pass(ctx, LFP_PASS_NOT_IP);
}

/* The graph: the gate first; a bridge port runs bridge -> (router for frames to the bridge's
 * MAC); any other interface runs the router for frames to its MAC. The router's way out may
 * continue into a bridge's FDB (router -> bridge, router_egress). */
static __always_inline int linuxfp_rx(lfp_ctx *ctx)
{
	const struct lfp_if *iface;
	struct gate_ref gate;
	void *data, *data_end;
	struct ethhdr *eth;
	enum lfp_reason r;
	__u32 in;

	/* TC: a VLAN tag already taken out of the data (the stack untags before tc ingress). */
	if (ctx_vlan_tagged(ctx))
		return lfp_pass(ctx, LFP_PASS_NOT_IP);
	/* XDP: a frame in several buffers. Forwarding it is not shown exact: the modules check
	 * lengths against the linear part, and a redirect of such a frame to a driver without
	 * scatter-gather XDP transmit is dropped where Linux would send it. Linux's. */
	if (ctx_multi_buffer(ctx))
		return lfp_pass(ctx, LFP_PASS_MULTI_BUFFER);
	eth = ctx_data(ctx);
	ctx_pull(ctx, (void *)(eth + 1) <= ctx_data_end(ctx) && eth_proto(eth) == bpf_htons(ETH_P_IP) ?
			      LFP_PULL_LEN4 : LFP_PULL_LEN);
	data = ctx_data(ctx);
	data_end = ctx_data_end(ctx);
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	/* The ingress ifindex and the interface's data, read once here and handed on: each read of
	 * the ifindex is three dependent loads (XDP: rxq->dev->ifindex), each lookup an array access. */
	in = ctx_ingress_ifindex(ctx);
	gate_lookup(&gate);
	r = gate_check(gate.g, gate.f, eth_proto(eth), in);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	/* Uncounted: there is no row to count it in (lfp_count). */
	iface = lfp_iface_of(in);
	if (!iface)
		return CTX_PASS;
	if (cfg_bridge) {
		struct bridge_up up;
		int v = bridge_rx(ctx, iface, &gate, in, &up);

		if (!up.route)
			return v;
		return linuxfp_router(ctx, iface, &gate, in, up.proto);
	}

	/* ip_rcv() drops PACKET_OTHERHOST; broadcast and multicast are Linux's (ARP, ND, IGMP ...). */
	if (!mac_equal_w(eth->h_dest, iface->mac))
		return lfp_pass(ctx, LFP_PASS_NOT_FOR_US);
	return linuxfp_router(ctx, iface, &gate, in, eth_proto(eth));
}

#if LFP_TC
/* The inner frame of a VXLAN packet the underlay's program decapsulated for vxlan device dev
 * (vxlan.h, cfg_vxlan_rx_route), routed as dev's own program would route it after receiving it
 * (linuxfp_rx: the gate for dev, its data, a frame to its MAC, its IPv4 routing), without the
 * backlog queue and second receive round a redirect into dev costs. What is left of dev's
 * receive path is ____dev_forward_skb()'s zeroed priority, done here; the controller made sure
 * nothing else is on that path (taps aside: see the graph), and everything not forwarded goes
 * to dev's receive path as before (linuxfp_route_verdict). A global function: verified once,
 * on its own, and with a stack frame of its own after the underlay's program has left its
 * pipeline (linuxfp_tc). */
__attribute__((noinline)) int linuxfp_decap_route(struct __sk_buff *ctx, __u32 dev)
{
	const struct lfp_if *iface;
	struct gate_ref gate;
	struct ethhdr *eth;
	struct lfp_scratch *scr;
	int v;

	if (!ctx)
		return CTX_DROP;
	ctx_set_priority(ctx, 0);
	ctx_pull(ctx, LFP_PULL_LEN4);
	eth = ctx_data(ctx);
	gate_lookup(&gate);
	if ((void *)(eth + 1) > ctx_data_end(ctx) || eth_proto(eth) != bpf_htons(ETH_P_IP) ||
	    gate_check(gate.g, gate.f, eth_proto(eth), dev) != LFP_FORWARDED)
		return linuxfp_decap_handoff(ctx, dev);
	iface = lfp_iface_of(dev);
	if (!iface || !mac_equal_w(eth->h_dest, iface->mac))
		return linuxfp_decap_handoff(ctx, dev);
	v = linuxfp_route(ctx, iface, &gate, dev, 1, 1);
	/* Taken (not handed over: that cleared it): the decapsulation counted, and the hash
	 * cleared as iptunnel_pull_header() clears a non-L4 one, both left for now by vxlan_rx(). */
	scr = lfp_scratch();
	if (scr && scr->vxu.on) {
		scr->vxu.on = 0;
		lfp_count(ctx, LFP_DECAPSULATED);
		if (!scr->vxu.l4_hash)
			ctx_clear_hash(ctx);
	}
	return v;
}

/* linuxfp_rx in a frame of its own, for programs that may route an inner frame after it
 * (linuxfp_decap_route): the two frames are never on the stack together, and each is within
 * the verifier's limit alone, not summed. Removed from programs without that setting. */
static __attribute__((noinline)) int linuxfp_rx_framed(struct __sk_buff *ctx)
{
	return linuxfp_rx(ctx);
}

SEC("tc")
int linuxfp_tc(struct __sk_buff *ctx)
{
	int v;

	/* After the interface's XDP program: only what it marked for tc (see cfg_tc_after); the
	 * rest it has counted and handed to Linux already. */
	if (cfg_tc_companion && !lfp_marked_for_tc(ctx))
		return CTX_PASS;
	if (!cfg_vxlan_rx_route)
		return linuxfp_rx(ctx);
	v = linuxfp_rx_framed(ctx);
	if (v >= LFP_VX_ROUTE)
		return linuxfp_decap_route(ctx, v & (LFP_VX_ROUTE - 1));
	return v;
}
#else
/* Frags-aware: see ctx_multi_buffer(). */
SEC("xdp.frags")
int linuxfp_xdp(struct xdp_md *ctx)
{
	return lfp_xdp_finish(ctx, linuxfp_rx(ctx));
}
#endif
