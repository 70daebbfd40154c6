/* FIB cache module: the kernel's routing answer (bpf_fib_lookup()) for a block of destinations
 * (an IPv4 /24, an IPv6 /64: include/fibcache_map.h), kept for as long as nothing it depends on
 * has changed. The lookup is most of what a forwarded packet costs; asked once per block
 * instead of once per packet, it is the same answer, because:
 *
 * - The key holds everything the answer depends on where the cache is used: the device the
 *   packet is routed from (forwarding sysctls, the ingress device's table), the destination's
 *   block and the TOS (IPv4) or flow information (IPv6). The source address, the ports and the
 *   protocol matter only to policy rules, multipath hashing and IPv6 source-specific routes;
 *   the controller turns the cache off for a family that has any (graph/fibcache.go says why,
 *   per family, in status), and a request that adds one is counted by the fence
 *   (include/fence.h), so no packet of the family is decided before the controller has read it.
 * - One answer holds for every destination of a block when the route it comes from has a
 *   gateway (the next hop is the gateway, not the destination) and no route longer than the
 *   block lies inside it: then every destination of the block meets the same routes, in the
 *   same order. The controller writes the blocks that routes longer than a block split, of any
 *   type and table, and those of the local addresses (lfp_fib_split); the netlink watcher counts
 *   every new route longer than a block while the cache is on, so the family waits behind the
 *   fence until the controller has written its block. An answer with the destination as its next
 *   hop (a connected route), or for a split block, is kept for that destination alone, and the
 *   block is marked "per destination" (two lookups per packet there: the block's, the
 *   destination's).
 * - An entry holds the generation it was filled under, read before the lookup; it answers only
 *   while the generation is still that one. The generation moves on after every change that can
 *   alter an answer, before the command that made it returns: every netlink request for links,
 *   addresses, routes, rules, nexthops and neighbours (the netlink watcher, counted or not), the
 *   neighbour table's own changes (bpf/netlink_watch.c: its tracepoints fire after an entry's
 *   state or address changed, or it was removed, as when a device goes away), and every time
 *   the controller opens the fence (for sysctl writes, which the watcher sees before they take
 *   effect, and the split blocks it writes). A change racing a fill moves the generation past
 *   the one the entry holds.
 * - The MTU: the entry holds the largest IP length the lookup lets through for the route (a
 *   second lookup, at fill time only); larger packets go to Linux as the lookup would send
 *   them. A path MTU exception Linux learns later (no event) is not seen; ip_forward() and
 *   ip6_forward() ignore those unless net.ipv4.ip_forward_use_pmtu=1 or the route's MTU is
 *   locked, and the controller turns the cache off in both cases.
 * Only successful answers are kept: every other one is Linux's packet anyway, and asked again.
 *
 * The VXLAN module's outer route (vxlan.h) is asked here too: it is a lookup like the router's,
 * from the loopback device (ifindex 1, whose forwarding sysctl the generation covers as any
 * device's), with the outer destination and TOS in the key, so the same argument holds for it. */
#ifndef LFP_FIBCACHE_H
#define LFP_FIBCACHE_H

#include "ctx.h"
#include "linuxfp_types.h"
#include "fibcache_map.h"
#include "gate.h"
#include "neigh.h"

/* The answers, per CPU, in sets of two places (struct lfp_fib_set) found by a hash of the key
 * (fib_cache_set_of()): an array's lookup is inlined by the verifier, where a hash map's is a
 * call into the kernel's hash table (the key hashed, the bucket walked, the key compared: on the
 * AMD VM, where every return is mispredicted, about a quarter of a routed packet's program time).
 * A place answers only for the key it holds, compared in full, and under the generation it holds;
 * two keys of one set take both places, a third replaces one of them (asked again later: only
 * slower). Per CPU: a program runs to its end on its CPU, so no place is read half written
 * (lfp_scratch's argument, state.h), and each CPU fills its own places. One array with a range
 * of 2^LFP_FIB_SET_SHIFT sets per CPU (the controller sizes it for the possible CPUs: 256 KiB
 * each), not a per-CPU array, whose lookup reads the element's per-CPU pointer first (one more
 * cache line per packet). A CPU beyond the array's end finds no set: the kernel is asked.
 *
 * Mappable only for where that puts the values: at the start of a page (an array's values
 * otherwise start after the map's header, at no particular offset within a cache line), so each
 * place starts a cache line and an IPv4 hit reads one (struct lfp_fib_entry). Nothing maps it. */
#define LFP_FIB_SET_SHIFT 10

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fib_set);
	__uint(max_entries, 1 << LFP_FIB_SET_SHIFT); /* times the possible CPUs: dataplane.New */
	__uint(map_flags, BPF_F_MMAPABLE);
} lfp_fib_cache SEC(".maps");

/* The blocks whose destinations may meet different routes (a route longer than the block, a
 * local address inside it), keyed like lfp_fib_cache with ifindex and flow 0. Read only when
 * an answer is kept. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_fib_key);
	__type(value, __u8);
	__uint(max_entries, LFP_FIB_SPLIT_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lfp_fib_split SEC(".maps");

#define FIB_MISS (-1) /* nothing kept under the generation: ask and keep */
#define FIB_ASK (-2)  /* the cache is off: ask the kernel */

/* Per-CPU scratch space of a lookup through the cache (in struct lfp_scratch; its own struct so
 * that vxlan.h, which state.h includes, can have one too). */
struct fib_cache_scr {
	struct lfp_fib_key key; /* the key fib_cache_get() left for fib_cache_fill() */
	__u32 set;              /* the key of lfp_fib_cache's set (this CPU's) */
	/* The answer's next hop is not in the STALE set (neigh_not_stale()): fib_lookup_cached()'s
	 * output beside the answer, 0 where it cannot tell. */
	__u32 neigh_ok;
	/* The generation the answer was asked under (0: not from the cache), and where its egress
	 * is a vxlan device whose data the answer keeps, that data (vx_ok; lib/vxlan.h). */
	__u64 gen;
	__u32 vx_ok;
	struct lfp_vx_remote vx;
	struct lfp_fib_entry entry;
	__u64 probe[sizeof(struct bpf_fib_lookup) / 8]; /* bytes: bpf2go cannot describe the struct */
};

/* The generation an answer for family v4 is filled under, or 0 where the cache is off (gt: the
 * gate's value, gate_lookup()'s). */
static __always_inline __u64 fib_cache_gen_in(const struct lfp_config *cfg, const struct lfp_gate *gt, int v4)
{
	const struct lfp_fib_gen *g;
	__u32 key = 0;

	if (!(cfg->fib_flags & (v4 ? LFP_FIB_CACHE4 : LFP_FIB_CACHE6)))
		return 0;
	g = bpf_map_lookup_elem(&lfp_fib_gen, &key);
	if (!g || !gt)
		return 0;
	/* Both only grow: the sum moves on with either. +1: 0 stays "off". */
	return *(volatile const __u64 *)&g->gen[v4 ? 0 : 1] + *(volatile const __u64 *)&gt->fib_epoch + 1;
}

/* fib_cache_gen_in() with the gate looked up here. */
static __always_inline __u64 fib_cache_gen(const struct lfp_config *cfg, int v4)
{
	__u32 key = 0;

	return fib_cache_gen_in(cfg, bpf_map_lookup_elem(&lfp_gate_map, &key), v4);
}

/* Builds in k the key of fib's destination block (one = 0) or of the destination itself. */
static __always_inline void fib_cache_key(struct lfp_fib_key *k, const struct bpf_fib_lookup *fib, int v4, int one)
{
	k->ifindex = fib->ifindex;
	k->family = fib->family;
	k->one = one;
	k->pad[0] = k->pad[1] = 0;
	if (v4) {
		k->flow = fib->tos;
		k->dst[0] = one ? fib->ipv4_dst : fib->ipv4_dst & bpf_htonl(0xffffffffu << (32 - LFP_FIB_BLOCK4));
		k->dst[1] = k->dst[2] = k->dst[3] = 0;
	} else {
		k->flow = fib->flowinfo;
		/* LFP_FIB_BLOCK6 is 64: the first two words. */
		k->dst[0] = fib->ipv6_dst[0];
		k->dst[1] = fib->ipv6_dst[1];
		k->dst[2] = one ? fib->ipv6_dst[2] : 0;
		k->dst[3] = one ? fib->ipv6_dst[3] : 0;
	}
}

/* The set of lfp_fib_cache that key k may be kept in on this CPU, left in fc->set. The key's
 * block, or destination, words, device and flow are mixed, each by a multiplication whose high
 * bits depend on all of its input; dst[2] and dst[3] are 0 in IPv4 and block keys, and a
 * destination's key differs from its block's in them or (IPv4) in dst[0]. */
static __always_inline __u32 *fib_cache_set_of(struct fib_cache_scr *fc, const struct lfp_fib_key *k, int v4)
{
	__u32 h = (k->ifindex ^ k->flow) * 0x9e3779b1u;

	h = (h ^ k->dst[0]) * 0x85ebca6bu;
	if (!v4) {
		h = (h ^ k->dst[1]) * 0xc2b2ae35u;
		h = (h ^ k->dst[2]) * 0x9e3779b1u;
		h = (h ^ k->dst[3]) * 0x85ebca6bu;
	}
	fc->set = bpf_get_smp_processor_id() << LFP_FIB_SET_SHIFT | h >> (32 - LFP_FIB_SET_SHIFT);
	return &fc->set;
}

/* Whether place w holds key k: all 28 bytes, the padding too (fib_cache_key() zeroes it), as
 * three 64-bit words and one 32-bit word (both keys are in map values, where the verifier asks no
 * alignment of a load on this architecture; both are 8-aligned anyway). */
static __always_inline int fib_cache_holds(const struct lfp_fib_way *w, const struct lfp_fib_key *k)
{
	const __u64 *a = (const __u64 *)&w->key, *b = (const __u64 *)k;

	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) |
		(__u64)(((const __u32 *)a)[6] ^ ((const __u32 *)b)[6])) == 0;
}

/* The place of set s that holds key k under generation gen, or NULL. */
static __always_inline struct lfp_fib_way *fib_cache_way(struct lfp_fib_set *s, const struct lfp_fib_key *k,
							 __u64 gen)
{
	if (s->way[0].e.gen == gen && fib_cache_holds(&s->way[0], k))
		return &s->way[0];
	if (s->way[1].e.gen == gen && fib_cache_holds(&s->way[1], k))
		return &s->way[1];
	return NULL;
}

/* The answer kept for key k under generation gen, or NULL. */
static __always_inline const struct lfp_fib_entry *fib_cache_find(struct fib_cache_scr *fc,
								  const struct lfp_fib_key *k, int v4, __u64 gen)
{
	struct lfp_fib_set *s = bpf_map_lookup_elem(&lfp_fib_cache, fib_cache_set_of(fc, k, v4));
	struct lfp_fib_way *w;

	if (!s)
		return NULL;
	w = fib_cache_way(s, k, gen);
	return w ? &w->e : NULL;
}

/* Keeps answer e for key k: in the place that holds k already, else in one whose answer is of an
 * older generation, else in either, chosen at random (fills are rare: each asks the kernel). */
static __always_inline void fib_cache_put(struct fib_cache_scr *fc, const struct lfp_fib_key *k,
					  const struct lfp_fib_entry *e, int v4)
{
	struct lfp_fib_set *s = bpf_map_lookup_elem(&lfp_fib_cache, fib_cache_set_of(fc, k, v4));
	struct lfp_fib_way *w;

	if (!s)
		return;
	if (fib_cache_holds(&s->way[0], k))
		w = &s->way[0];
	else if (fib_cache_holds(&s->way[1], k))
		w = &s->way[1];
	else if (s->way[0].e.gen != e->gen)
		w = &s->way[0];
	else if (s->way[1].e.gen != e->gen)
		w = &s->way[1];
	else
		w = &s->way[bpf_get_prandom_u32() & 1];
	w->key = *k;
	w->e = *e;
}

/* The cached answer for the lookup fib describes (its input, filled by the family's entry point
 * and router_prepare()): written into fib as bpf_fib_lookup() would write it (all but
 * rt_metric, which no module reads), and its result code returned; FIB_MISS when there is none
 * under generation gen. The block's answer, and where the block's answers are per destination,
 * the destination's. The key of the answer to fill is left in fc. */
static __always_inline int fib_cache_get(struct fib_cache_scr *fc, struct bpf_fib_lookup *fib, int v4, __u64 gen,
					 __u32 mtulen)
{
	struct lfp_fib_key *k = &fc->key;
	const struct lfp_fib_entry *e;

	fib_cache_key(k, fib, v4, 0);
	e = fib_cache_find(fc, k, v4, gen);
	if (!e)
		return FIB_MISS;
	if (e->flags & LFP_FIB_PER_DST) {
		fib_cache_key(k, fib, v4, 1);
		e = fib_cache_find(fc, k, v4, gen);
		if (!e)
			return FIB_MISS;
	}
	if (mtulen > e->mtu)
		return BPF_FIB_LKUP_RET_FRAG_NEEDED;
	fib->ifindex = e->ifindex;
	fib->h_vlan_proto = 0;
	fib->h_vlan_TCI = 0;
	if (v4) {
		fib->ipv4_dst = e->nh0;
	} else {
		fib->ipv6_dst[0] = e->nh0;
		fib->ipv6_dst[1] = e->nh6[0];
		fib->ipv6_dst[2] = e->nh6[1];
		fib->ipv6_dst[3] = e->nh6[2];
	}
	__builtin_memcpy(fib->smac, e->smac, ETH_ALEN);
	__builtin_memcpy(fib->dmac, e->dmac, ETH_ALEN);
	fc->neigh_ok = e->neigh_ok;
	if (e->flags & LFP_FIB_VX_OK) {
		fc->vx = e->vx;
		fc->vx_ok = 1;
	}
	return BPF_FIB_LKUP_RET_SUCCESS;
}

/* Whether the answer in fib (asked with probe's destination) may differ for other destinations
 * of the block in fc->key: its next hop is the destination itself, or the block is split. */
static __always_inline int fib_cache_per_dst(struct fib_cache_scr *fc, const struct bpf_fib_lookup *fib,
					     const struct bpf_fib_lookup *probe, int v4)
{
	struct lfp_fib_key *k = &fc->key;
	__u32 ifindex = k->ifindex, flow = k->flow;
	int split;

	if (v4 ? fib->ipv4_dst == probe->ipv4_dst
	       : (fib->ipv6_dst[0] == probe->ipv6_dst[0] && fib->ipv6_dst[1] == probe->ipv6_dst[1] &&
		  fib->ipv6_dst[2] == probe->ipv6_dst[2] && fib->ipv6_dst[3] == probe->ipv6_dst[3]))
		return 1;
	k->ifindex = 0;
	k->flow = 0;
	split = bpf_map_lookup_elem(&lfp_fib_split, k) != NULL;
	k->ifindex = ifindex;
	k->flow = flow;
	return split;
}

/* bpf_fib_lookup() for fib; a successful answer is kept under generation gen: for the whole
 * block, or, where the block's answers differ per destination, the block is marked so and the
 * answer kept for the destination alone. fc holds the key fib_cache_get() left. */
static __always_inline int fib_cache_fill(lfp_ctx *ctx, const struct lfp_config *cfg, struct fib_cache_scr *fc,
					  struct bpf_fib_lookup *fib, int v4, __u64 gen)
{
	struct bpf_fib_lookup *probe = (struct bpf_fib_lookup *)fc->probe;
	struct lfp_fib_entry *e = &fc->entry;
	int rc, prc;

	__builtin_memcpy(probe, fib, sizeof(*fib));
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return rc;
	e->gen = gen;
	if (!fc->key.one && fib_cache_per_dst(fc, fib, probe, v4)) {
		e->flags = LFP_FIB_PER_DST;
		fib_cache_put(fc, &fc->key, e, v4);
		fib_cache_key(&fc->key, probe, v4, 1);
	}
	e->flags = 0;
	/* The MTU the lookup checks lengths against: asked with the largest length, it answers
	 * FRAG_NEEDED with that MTU before it looks at the neighbour, or lets any length through. */
	probe->tot_len = 0xffff;
	prc = bpf_fib_lookup(ctx, probe, sizeof(*probe), 0);
	if (prc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		e->mtu = probe->mtu_result;
	else if (prc == BPF_FIB_LKUP_RET_SUCCESS)
		e->mtu = 0xffff;
	else
		return rc; /* the route changed meanwhile: not kept */
	e->ifindex = fib->ifindex;
	if (v4) {
		e->nh0 = fib->ipv4_dst;
		e->nh6[0] = e->nh6[1] = e->nh6[2] = 0;
	} else {
		e->nh0 = fib->ipv6_dst[0];
		e->nh6[0] = fib->ipv6_dst[1];
		e->nh6[1] = fib->ipv6_dst[2];
		e->nh6[2] = fib->ipv6_dst[3];
	}
	__builtin_memcpy(e->smac, fib->smac, ETH_ALEN);
	__builtin_memcpy(e->dmac, fib->dmac, ETH_ALEN);
	/* After the generation was read (router_fib): a next hop that becomes STALE later moves
	 * it on after it is in the set (netlink_watch.c, neigh_changed()). */
	e->neigh_ok = neigh_not_stale(cfg, fib);
	fc->neigh_ok = e->neigh_ok;
	fib_cache_put(fc, &fc->key, e, v4);
	return rc;
}

/* Keeps fc->vx with the answer fib_lookup_cached() just gave (the place holding fc->key under
 * fc->gen; none where that answer was not kept). The caller read fc->vx from its maps after the
 * generation was read, so it holds for as long as the answer does: the controller writes those
 * maps only in a Sync, which ends with a write of the gate that moves the generation on
 * (dataplane.writeGateLocked), and the changes of Linux's they follow (the vxlan device's link,
 * its FDB, the port range sysctl) are fenced until then. */
static __always_inline void fib_cache_keep_vx(struct fib_cache_scr *fc)
{
	struct lfp_fib_set *s;
	struct lfp_fib_way *w;

	if (!fc->gen)
		return;
	s = bpf_map_lookup_elem(&lfp_fib_cache, &fc->set);
	if (!s)
		return;
	w = fib_cache_way(s, &fc->key, fc->gen);
	if (!w)
		return;
	w->e.vx = fc->vx;
	w->e.flags |= LFP_FIB_VX_OK;
}

/* bpf_fib_lookup() for fib, answered by the cache where it may: gen is fib_cache_gen()'s (0: the
 * cache is off). fib->tot_len is the length the MTU check sees. fc->neigh_ok is set beside a
 * successful answer. */
static __always_inline int fib_lookup_cached(lfp_ctx *ctx, const struct lfp_config *cfg, struct fib_cache_scr *fc,
					     struct bpf_fib_lookup *fib, int v4, __u64 gen)
{
	int rc;

	fc->neigh_ok = 0;
	fc->vx_ok = 0;
	fc->gen = gen;
	rc = gen ? fib_cache_get(fc, fib, v4, gen, fib->tot_len) : FIB_ASK;
	if (rc == FIB_MISS)
		rc = fib_cache_fill(ctx, cfg, fc, fib, v4, gen);
	else if (rc == FIB_ASK)
		rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	return rc;
}

#endif
