/* Per-interface data. A program is specialised by what its interface's graph contains (frozen
 * .rodata: modules, families, hook, ...); what differs between two interfaces with the same graph
 * (MAC, counter slot, bridge) is data, looked up by ingress ifindex. So the controller verifies
 * one program per kind of interface and attaches it to every interface of that kind: a new
 * interface like an existing one gets its fast path without a verification (tens of ms). */
#ifndef LFP_IFACE_H
#define LFP_IFACE_H

#include "ctx.h"
#include "linuxfp_types.h"

/* Indexed by ifindex (an inlined array access). Interfaces with larger ifindexes (a host that
 * has created many) are in lfp_ifs_hi. */
#define LFP_IFS_DIRECT 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_if);
	__uint(max_entries, LFP_IFS_DIRECT);
} lfp_ifs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lfp_if);
	__uint(max_entries, LFP_MAX_SLOTS);
} lfp_ifs_hi SEC(".maps");

/* Frozen per program: the interface is a bridge port (the program runs the bridge module). */
LFP_SETTING(__u32, bridge, 0, "the interface is a bridge port: the program runs the bridge module");

/* Out of line, so the compiler cannot merge it with the lfp_ifs lookup into one call on a map
 * chosen at run time: the verifier inlines an array lookup only where the map is known. */
static __attribute__((noinline)) const struct lfp_if *lfp_iface_hi(__u32 ifindex)
{
	return bpf_map_lookup_elem(&lfp_ifs_hi, &ifindex);
}

/* Interface ifindex's data; NULL when the controller has none for it (written before a program
 * is attached, cleared after it is detached: only a packet racing a detach sees NULL). */
static __always_inline const struct lfp_if *lfp_iface_of(__u32 ifindex)
{
	const struct lfp_if *i;

	if (ifindex < LFP_IFS_DIRECT)
		i = bpf_map_lookup_elem(&lfp_ifs, &ifindex);
	else
		i = lfp_iface_hi(ifindex);
	if (!i || !(i->flags & LFP_IF_VALID))
		return NULL;
	return i;
}

/* The ingress interface's data. The pipeline looks it up once per packet (linuxfp_rx) and hands
 * it on; this is for the paths that do not have it. */
static __always_inline const struct lfp_if *lfp_iface(const lfp_ctx *ctx)
{
	return lfp_iface_of(ctx_ingress_ifindex(ctx));
}

/* The device Linux routes the packet from: the ingress device itself (0 here), or on a bridge
 * port the bridge. */
static __always_inline __u32 lfp_l3_ifindex(const lfp_ctx *ctx)
{
	const struct lfp_if *i;

	if (!cfg_bridge)
		return 0;
	i = lfp_iface(ctx);
	return i ? i->l3_ifindex : 0;
}

#endif
