/* linuxfp data plane entry point: one program per kind of interface, specialised by the frozen
 * .rodata constants of the modules it includes (the verifier removes what the interface does not
 * use); what differs between interfaces of a kind (MAC, counters, bridge) is data (lib/iface.h).
 * Compiled twice from this source: for XDP, and with -DLFP_HOOK_TC for tc (tcx) ingress.
 * The graph: a bridge port runs bridge -> (router for frames to the bridge's MAC); any other
 * interface runs router; the router's egress may continue into a bridge's FDB (router -> bridge). */
#include "lib/ctx.h"
#include "lib/parse.h"
#include "lib/stats.h"
#include "lib/gate.h"
#include "lib/router.h"
#include "lib/bridge.h"

char LICENSE[] SEC("license") = "GPL";

/* Headers the modules read through direct packet access: Ethernet, IPv6 and a TCP header
 * (TC: an skb may hold less than that in its linear part). */
#define LFP_PULL_LEN (14 + 40 + 20)

static __always_inline int linuxfp_rx(lfp_ctx *ctx)
{
	const struct lfp_if *iface;
	void *data, *data_end;
	struct ethhdr *eth;
	enum lfp_reason r;

	/* TC: a VLAN tag already taken out of the data (the stack untags before tc ingress). */
	if (ctx_vlan_tagged(ctx))
		return lfp_pass(ctx, LFP_PASS_NOT_IP);
	/* XDP: a frame in several buffers. Forwarding it is not shown exact: the modules check
	 * lengths against the linear part, and a redirect of such a frame to a driver without
	 * scatter-gather XDP transmit is dropped where Linux would send it. Linux's. */
	if (ctx_multi_buffer(ctx))
		return lfp_pass(ctx, LFP_PASS_MULTI_BUFFER);
	ctx_pull(ctx, LFP_PULL_LEN);
	data = ctx_data(ctx);
	data_end = ctx_data_end(ctx);
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	r = gate_check(eth->h_proto);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	if (cfg_bridge)
		return bridge_rx(ctx);

	/* ip_rcv() drops PACKET_OTHERHOST; broadcast and multicast are Linux's (ARP, ND, IGMP ...). */
	iface = lfp_iface(ctx);
	if (!iface)
		return CTX_PASS;
	if (!mac_equal(eth->h_dest, iface->mac))
		return lfp_pass(ctx, LFP_PASS_NOT_FOR_US);

	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return router_ipv4(ctx);
	case bpf_htons(ETH_P_IPV6):
		return router_ipv6(ctx);
	}
	/* ARP, VLAN tags (802.1Q is not even built here), LLDP ...: Linux's. */
	return lfp_pass(ctx, LFP_PASS_NOT_IP);
}

#if LFP_TC
SEC("tc")
int linuxfp_tc(struct __sk_buff *ctx)
{
	/* After the interface's XDP program: only what it marked for tc; the rest it has counted
	 * and handed to Linux already. */
	if (cfg_tc_companion && !lfp_marked_for_tc(ctx))
		return CTX_PASS;
	return linuxfp_rx(ctx);
}
#else
/* Frags-aware: see ctx_multi_buffer(). */
SEC("xdp.frags")
int linuxfp_xdp(struct xdp_md *ctx)
{
	return lfp_xdp_finish(ctx, linuxfp_rx(ctx));
}
#endif
