/* Counters: packets fast-pathed and packets handed to Linux, per interface slot and reason. */
#ifndef LFP_STATS_H
#define LFP_STATS_H

#include "ctx.h"
#include "linuxfp_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_counter);
	__uint(max_entries, LFP_MAX_SLOTS * LFP_REASON_MAX);
} lfp_stats SEC(".maps");

/* Which row of lfp_stats this interface's program counts into (set by the controller). */
volatile const __u32 cfg_slot = 0;

static __always_inline void lfp_count(const lfp_ctx *ctx, enum lfp_reason reason)
{
	__u32 idx = cfg_slot * LFP_REASON_MAX + reason;
	struct lfp_counter *c = bpf_map_lookup_elem(&lfp_stats, &idx);

	if (c) {
		c->packets++;
		c->bytes += ctx_len(ctx);
	}
}

/* XDP with a tc program after it on the same interface (the controller attaches one where some
 * destination takes skbs only: a veth whose peer has neither XDP nor GRO, a vxlan device): a
 * packet XDP hands on for such a reason is marked in its metadata, which the skb carries to the
 * tc program; that one runs the same modules for marked packets only (cfg_tc_companion). */
volatile const __u32 cfg_tc_after = 0;
volatile const __u32 cfg_tc_companion = 0;

#define LFP_META_TC 0x6c667063 /* "lfpc" */
#define LFP_XDP_TO_TC 0x10000 /* lfp_pass()'s verdict for the tc program, with the reason */

/* Hand the packet to Linux, untouched, and say why; at XDP with a tc program after it, hand
 * what only an skb can take to that program instead. */
static __always_inline int lfp_pass(const lfp_ctx *ctx, enum lfp_reason reason)
{
#if !LFP_TC
	/* The entry point marks it (lfp_xdp_finish): one place, not every caller's stack. */
	if (cfg_tc_after && (reason == LFP_PASS_EGRESS_NOT_READY || reason == LFP_PASS_VXLAN))
		return LFP_XDP_TO_TC | reason;
#endif
	lfp_count(ctx, reason);
	return CTX_PASS;
}

#if !LFP_TC
/* The XDP entry point's last step: a packet lfp_pass() meant for the tc program gets the mark
 * (or, where the driver gives no room for metadata, goes to Linux as it would have). */
static __always_inline int lfp_xdp_finish(struct xdp_md *ctx, int verdict)
{
	__u32 *meta;

	if (!(verdict & LFP_XDP_TO_TC))
		return verdict;
	if (!bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u32))) {
		meta = (void *)(long)ctx->data_meta;
		if ((void *)(meta + 1) <= (void *)(long)ctx->data) {
			*meta = LFP_META_TC;
			lfp_count(ctx, LFP_TO_TC);
			return XDP_PASS;
		}
	}
	lfp_count(ctx, (enum lfp_reason)(verdict & 0xff));
	return XDP_PASS;
}
#endif

#if LFP_TC
/* The tc program after XDP: is the packet one XDP marked for it? */
static __always_inline int lfp_marked_for_tc(struct __sk_buff *ctx)
{
	__u32 *meta = (void *)(long)ctx->data_meta;

	if ((void *)(meta + 1) > (void *)(long)ctx->data)
		return 0;
	return *meta == LFP_META_TC;
}
#endif

/* Drop the packet in the fast path (Linux would drop it: a netfilter rule or policy). */
static __always_inline int lfp_drop(const lfp_ctx *ctx, enum lfp_reason reason)
{
	lfp_count(ctx, reason);
	return CTX_DROP;
}

#endif
