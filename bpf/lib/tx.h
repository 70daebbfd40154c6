/* The transmit step every module ends in: where a packet the fast path decided leaves, and the
 * checks that the chosen device takes it exactly as Linux's transmit would. */
#ifndef LFP_TX_H
#define LFP_TX_H

#include "ctx.h"
#include "linuxfp_types.h"

/* XDP: devices that take a redirected frame. A redirect into one that cannot (a veth whose peer
 * has no NAPI: neither XDP nor GRO) is dropped where Linux would have delivered the packet; the
 * controller adds a device when the kernel reports its NDO_XMIT XDP feature. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(max_entries, 1024);
} lfp_tx_devs SEC(".maps");

/* TC: devices a redirected skb may go to (up, with carrier), and how (struct lfp_tc_tx). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lfp_tc_tx);
	__uint(max_entries, 4096);
} lfp_tc_tx_devs SEC(".maps");

/* Keep the skb's priority (TC). */
#define TX_PRIO_KEEP 0xffffffffU

/* Set up the redirect of the packet out of `out`; l3len is its length after the Ethernet header
 * as it will leave (for GSO, one segment's). prio is the skb priority Linux's forwarding gives it
 * (TX_PRIO_KEEP: unchanged). Returns LFP_FORWARDED, or why not: the packet is still untouched
 * then. */
static __always_inline enum lfp_reason tx_prepare(lfp_ctx *ctx, __u32 out, __u32 l3len, __u32 prio)
{
	struct lfp_tc_tx *tx;

	/* XDP (ctx.h): the devmap holds only the devices that take a redirected frame. */
	if (CTX_REDIRECT_BY_DEVMAP)
		return ctx_redirect_map(&lfp_tx_devs, out) ? LFP_PASS_EGRESS_NOT_READY : LFP_FORWARDED;
	tx = bpf_map_lookup_elem(&lfp_tc_tx_devs, &out);
	if (!tx)
		return LFP_PASS_EGRESS_NOT_READY;
	/* A redirected skb goes through dev_queue_xmit() of `out`: its qdisc, tc egress and
	 * netfilter egress hook still apply, as for a packet Linux forwards. */
	if (!(tx->flags & LFP_TX_PEER)) {
		if (prio != TX_PRIO_KEEP)
			ctx_set_priority(ctx, prio);
		ctx_redirect(ctx, out);
		return LFP_FORWARDED;
	}
	/* `out` is a veth whose peer is in another namespace (a container) and whose own transmit
	 * path is empty (noqueue, no tc egress, no netfilter egress: the controller checked). Linux
	 * would pass the skb through veth_xmit() to the peer's receive path; bpf_redirect_peer()
	 * puts it there directly. veth_xmit() drops what the peer's MTU does not allow
	 * (is_skb_forwardable(); never GSO trains): leave that to Linux. */
	if (!ctx_gso_size(ctx) && l3len > tx->peer_mtu)
		return LFP_PASS_EGRESS_NOT_READY;
	/* ____dev_forward_skb() zeroes the priority of what crosses a veth. */
	ctx_set_priority(ctx, 0);
	ctx_redirect_peer(ctx, out);
	return LFP_FORWARDED;
}

#endif
