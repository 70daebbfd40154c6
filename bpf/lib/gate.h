/* Gate: the families the fast path may not decide, because the controller could not bring the
 * data plane to the configuration Linux has for them (a map too small for a ruleset, an update
 * that failed). Their packets go to Linux until an apply succeeds: the fast path never keeps
 * deciding with the data it had before, which Linux has replaced. Checked once per packet, before
 * any module; a frame that is neither IPv4 nor IPv6 goes to Linux anyway. */
#ifndef LFP_GATE_H
#define LFP_GATE_H

#include "ctx.h"
#include "linuxfp_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_gate);
	__uint(max_entries, 1);
} lfp_gate_map SEC(".maps");

/* The gate holds the family of a frame of ethertype proto (network byte order). */
static __always_inline int gate_closed(__be16 proto)
{
	const struct lfp_gate *g;
	__u32 key = 0;

	g = bpf_map_lookup_elem(&lfp_gate_map, &key);
	if (!g || !g->failed)
		return 0;
	if (proto == bpf_htons(ETH_P_IP))
		return g->failed & LFP_GATE_IPV4;
	if (proto == bpf_htons(ETH_P_IPV6))
		return g->failed & LFP_GATE_IPV6;
	return 0;
}

#endif
