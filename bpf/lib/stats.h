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

/* Hand the packet to Linux, untouched, and say why. */
static __always_inline int lfp_pass(const lfp_ctx *ctx, enum lfp_reason reason)
{
	lfp_count(ctx, reason);
	return CTX_PASS;
}

/* Drop the packet in the fast path (Linux would drop it: a netfilter rule or policy). */
static __always_inline int lfp_drop(const lfp_ctx *ctx, enum lfp_reason reason)
{
	lfp_count(ctx, reason);
	return CTX_DROP;
}

#endif
