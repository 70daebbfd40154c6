/* The transmit step every module ends in: where a packet the fast path decided leaves, and the
 * checks that the chosen device takes it exactly as Linux's transmit would. */
#ifndef LFP_TX_H
#define LFP_TX_H

#include "ctx.h"
#include "linuxfp_types.h"
#include "iface.h"

/* XDP: devices that take a redirected frame. A redirect into one that cannot (a veth whose peer
 * has no NAPI: neither XDP nor GRO) is dropped where Linux would have delivered the packet; the
 * controller adds a device when the kernel reports its NDO_XMIT XDP feature. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(max_entries, 1024);
} lfp_tx_devs SEC(".maps");

/* TC: devices a redirected skb may go to (up, with carrier), and how (struct lfp_tc_tx), by
 * ifindex as lfp_ifs and lfp_ifs_hi hold interfaces (iface.h): every packet the fast path sends
 * looks its egress up, and an array's lookup is inlined where a hash lookup is a call. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_tc_tx);
	__uint(max_entries, LFP_IFS_DIRECT);
} lfp_tc_tx_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lfp_tc_tx);
	__uint(max_entries, 4096);
} lfp_tc_tx_hi SEC(".maps");

/* Out of line for the same reason as lfp_iface_hi(). */
static __attribute__((noinline)) struct lfp_tc_tx *tc_tx_hi(__u32 ifindex)
{
	return bpf_map_lookup_elem(&lfp_tc_tx_hi, &ifindex);
}

static __always_inline struct lfp_tc_tx *tc_tx(__u32 ifindex)
{
	struct lfp_tc_tx *tx;

	if (ifindex < LFP_IFS_DIRECT)
		tx = bpf_map_lookup_elem(&lfp_tc_tx_devs, &ifindex);
	else
		tx = tc_tx_hi(ifindex);
	return tx && (tx->flags & LFP_TX_OK) ? tx : NULL;
}

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
	tx = tc_tx(out);
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
