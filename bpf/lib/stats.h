/* Counters: packets fast-pathed and packets handed to Linux, per interface slot and reason. */
#ifndef LFP_STATS_H
#define LFP_STATS_H

#include "ctx.h"
#include "iface.h"
#include "monitor.h"
#include "linuxfp_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_counter);
	__uint(max_entries, LFP_MAX_SLOTS * LFP_REASON_MAX);
} lfp_stats SEC(".maps");

/* Counts into the row of the ingress interface i (lfp_if.slot). A packet of an interface without
 * data (racing its detach) is not counted. */
static __always_inline void lfp_count_in(const lfp_ctx *ctx, const struct lfp_if *i, enum lfp_reason reason)
{
	struct lfp_counter *c;
	__u32 idx;

	if (!i)
		return;
	idx = i->slot * LFP_REASON_MAX + reason;
	c = bpf_map_lookup_elem(&lfp_stats, &idx);
	if (c) {
		c->packets++;
		/* Only a multi-buffer frame has bytes beyond ctx_len(): the helper call that
		 * counts them runs for those frames alone. */
		c->bytes += reason == LFP_PASS_MULTI_BUFFER ? ctx_full_len(ctx) : ctx_len(ctx);
	}
}

static __always_inline void lfp_count(const lfp_ctx *ctx, enum lfp_reason reason)
{
	lfp_count_in(ctx, lfp_iface(ctx), reason);
}

/* XDP with a tc program after it on the same interface (--hook auto). Some packets only an skb
 * can take where they go: a redirect into a device that cannot take an XDP frame
 * (LFP_PASS_EGRESS_NOT_READY, tx.h: a veth whose peer has neither XDP nor GRO, a vxlan device),
 * a VXLAN packet for a device of this host (LFP_PASS_VXLAN, ctx.h). The XDP program marks such a
 * packet in its metadata, which the skb carries to the tc program; that one runs the same modules
 * for marked packets only (cfg_tc_companion). The tc program is attached on demand: the first
 * such packet asks the controller for it (lfp_tc_requests) and, like every one until it is
 * attached, goes to Linux unmarked, counted under its own reason. An interface that never sees
 * such packets costs no second program, and a new destination of that kind changes no XDP
 * program. cfg_tc_after is set only in XDP programs, cfg_tc_companion only in that tc program. */
LFP_SETTING(__u32, tc_after, 0, "XDP: marks the packets only an skb can take for the tc program after it");
LFP_SETTING(__u32, tc_companion, 0, "tc: the program after XDP (runs on the packets XDP marked only)");

#define LFP_META_TC 0x6c667063 /* "lfpc" */
#define LFP_XDP_TO_TC 0x10000 /* lfp_pass()'s verdict for the tc program, with the reason */
#define LFP_TC_ASK_NS 100000000ULL /* at most one request per interface per 100 ms */

/* Per slot: is the tc program attached (set by the controller after attaching it, cleared
 * before detaching it), and when was it last asked for. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_tc_companion);
	__uint(max_entries, LFP_MAX_SLOTS);
} lfp_tc_companions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} lfp_tc_requests SEC(".maps");

/* Hand the packet to Linux, untouched, and say why; at XDP with a tc program after it, hand
 * what only an skb can take to that program instead (see cfg_tc_after). */
static __always_inline int lfp_pass(const lfp_ctx *ctx, enum lfp_reason reason)
{
	/* The entry point marks it (lfp_xdp_finish): one place, not every caller's stack. */
	if (cfg_tc_after && (reason == LFP_PASS_EGRESS_NOT_READY || reason == LFP_PASS_VXLAN))
		return LFP_XDP_TO_TC | reason;
	lfp_count(ctx, reason);
	lfp_monitor(ctx, reason, LFP_MON_PASS);
	return CTX_PASS;
}

/* The XDP entry point's last step: a packet lfp_pass() meant for the tc program gets the mark
 * when that program is attached; otherwise (or where the driver gives no room for metadata) it
 * goes to Linux as it would have, and the controller is asked for the tc program. */
static __always_inline int lfp_xdp_finish(lfp_ctx *ctx, int verdict)
{
	enum lfp_reason reason = (enum lfp_reason)(verdict & 0xff);
	const struct lfp_if *i;
	struct lfp_tc_companion *c;
	__u32 key, *meta;

	if (!(verdict & LFP_XDP_TO_TC))
		return verdict;
	i = lfp_iface(ctx);
	if (!i)
		return CTX_PASS;
	key = i->slot;
	c = bpf_map_lookup_elem(&lfp_tc_companions, &key);
	if (!c)
		goto linux;
	if (!c->attached) {
		__u64 now = bpf_ktime_get_coarse_ns();

		/* Racing CPUs may both ask: the controller attaches once. */
		if (now - c->asked >= LFP_TC_ASK_NS) {
			struct lfp_tc_request r = { .ifindex = ctx_ingress_ifindex(ctx), .slot = key };

			c->asked = now;
			bpf_ringbuf_output(&lfp_tc_requests, &r, sizeof(r), 0);
		}
		goto linux;
	}
	if (!ctx_adjust_meta(ctx, -(int)sizeof(__u32))) {
		meta = ctx_data_meta(ctx);
		if ((void *)(meta + 1) <= ctx_data(ctx)) {
			*meta = LFP_META_TC;
			lfp_count(ctx, LFP_TO_TC);
			return CTX_PASS;
		}
	}
linux:
	lfp_count(ctx, reason);
	lfp_monitor(ctx, reason, LFP_MON_PASS);
	return CTX_PASS;
}

/* The tc program after XDP: is the packet one XDP marked for it? */
static __always_inline int lfp_marked_for_tc(const lfp_ctx *ctx)
{
	__u32 *meta = ctx_data_meta(ctx);

	if ((void *)(meta + 1) > ctx_data(ctx))
		return 0;
	return *meta == LFP_META_TC;
}

/* Drop the packet in the fast path (Linux would drop it: a netfilter rule or policy). */
static __always_inline int lfp_drop(const lfp_ctx *ctx, enum lfp_reason reason)
{
	lfp_count(ctx, reason);
	lfp_monitor(ctx, reason, LFP_MON_DROP);
	return CTX_DROP;
}

#endif
