/* linuxfp data plane entry point: one program per interface, specialised by the frozen .rodata
 * constants of the modules it includes; the verifier removes what an interface does not use.
 * The graph: a bridge port runs bridge -> (router for frames to the bridge's MAC); any other
 * interface runs router; the router's egress may continue into a bridge's FDB (router -> bridge). */
#include "lib/ctx.h"
#include "lib/parse.h"
#include "lib/stats.h"
#include "lib/router.h"
#include "lib/bridge.h"

char LICENSE[] SEC("license") = "GPL";

SEC("xdp")
int linuxfp_xdp(struct xdp_md *ctx)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct ethhdr *eth = data;

	if (cfg_bridge)
		return bridge_rx(ctx);

	if ((void *)(eth + 1) > data_end)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	/* ip_rcv() drops PACKET_OTHERHOST; broadcast and multicast are Linux's (ARP, ND, IGMP ...). */
	if (!mac_equal(eth->h_dest, cfg_mac))
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
