/* Gate: the families the fast path may not decide now. Either the controller could not bring
 * the data plane to the configuration Linux has for them (a map too small for a ruleset, an
 * update that failed: apply_failed, until an apply succeeds), or Linux has applied a change the
 * data plane does not follow yet (the fence, include/fence.h: fenced, until the controller has
 * read it and brought the data plane to it). The fast path never keeps deciding with data Linux
 * has replaced. Checked once per packet, before any module; a frame that is neither IPv4 nor
 * IPv6 goes to Linux anyway. */
#ifndef LFP_GATE_H
#define LFP_GATE_H

#include "ctx.h"
#include "linuxfp_types.h"
#include "fence.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_gate);
	__uint(max_entries, 1);
} lfp_gate_map SEC(".maps");

/* The gate's maps, looked up once per packet (gate_lookup) and handed to each check: an inlined
 * array lookup is still a few instructions and a load of its key from the stack. */
struct gate_ref {
	const struct lfp_gate *g;
	const struct lfp_fence *f;
};

/* 0 when either map has no value (cannot happen: both are arrays of one). */
static __always_inline int gate_lookup(struct gate_ref *gr)
{
	__u32 key = 0;

	gr->g = bpf_map_lookup_elem(&lfp_gate_map, &key);
	gr->f = bpf_map_lookup_elem(&lfp_fence_map, &key);
	return gr->g && gr->f;
}

/* LFP_FORWARDED (0) where the gate (g, f: gate_lookup()'s) lets a frame of ethertype proto
 * (network byte order) through, or the reason it goes to Linux. */
static __always_inline enum lfp_reason gate_check(const struct lfp_gate *g, const struct lfp_fence *f,
						  __be16 proto, __u32 ifindex)
{
	const __u64 *changed;
	__u32 unit, bit;

	if (proto == bpf_htons(ETH_P_IP))
		unit = LFP_FENCE_IPV4, bit = LFP_GATE_IPV4;
	else if (proto == bpf_htons(ETH_P_IPV6))
		unit = LFP_FENCE_IPV6, bit = LFP_GATE_IPV6;
	else
		return LFP_FORWARDED;
	if (!g || !f)
		return LFP_PASS_APPLY_FAILED;
	if (g->failed & bit)
		return LFP_PASS_APPLY_FAILED;
	if (f->seq[unit] != g->done[unit] || f->seq[LFP_FENCE_SYSCTL] != g->done[LFP_FENCE_SYSCTL])
		return LFP_PASS_FENCED;
	if (f->seq[LFP_FENCE_LINK] != g->done[LFP_FENCE_LINK]) {
		changed = bpf_map_lookup_elem(&lfp_if_fence, &ifindex);
		if (changed && *changed > g->done[LFP_FENCE_LINK])
			return LFP_PASS_FENCED;
	}
	return LFP_FORWARDED;
}

/* LFP_FORWARDED where a packet may leave by device ifindex, LFP_PASS_FENCED where a change of
 * the device (include/fence.h, the link unit) is not followed yet (gr: gate_lookup()'s). The
 * first test is all a packet costs while no such change waits. */
static __always_inline enum lfp_reason gate_egress_in(const struct gate_ref *gr, __u32 ifindex)
{
	const __u64 *changed;

	if (!gr->g || !gr->f)
		return LFP_PASS_APPLY_FAILED;
	if (gr->f->seq[LFP_FENCE_LINK] == gr->g->done[LFP_FENCE_LINK])
		return LFP_FORWARDED;
	changed = bpf_map_lookup_elem(&lfp_if_fence, &ifindex);
	if (changed && *changed > gr->g->done[LFP_FENCE_LINK])
		return LFP_PASS_FENCED;
	return LFP_FORWARDED;
}

/* gate_egress_in() with the maps looked up here. */
static __always_inline enum lfp_reason gate_egress(__u32 ifindex)
{
	struct gate_ref gr;

	gate_lookup(&gr);
	return gate_egress_in(&gr, ifindex);
}

#endif
