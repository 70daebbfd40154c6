/* The neighbour table's STALE entries, mirrored: the packet that moves one to DELAY is Linux's. */
#ifndef LFP_NEIGH_H
#define LFP_NEIGH_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"
#include "neigh_map.h"

/* Whether an insert into the set the neighbour tracepoints (bpf/netlink_watch.c) keep failed
 * that the controller has not made good. */
static __always_inline int neigh_stale_lost(void)
{
	__u32 k0 = 0, k1 = 1;
	const struct lfp_stale_count *a = bpf_map_lookup_elem(&lfp_stale_count, &k0);
	const struct lfp_stale_count *b = bpf_map_lookup_elem(&lfp_stale_count, &k1);

	return a && b && a->lost != b->lost;
}

/* Whether the set may hold k: its bucket's count (include/neigh_map.h) is not 0. */
static __always_inline int neigh_stale_maybe(const struct lfp_neigh_key *k)
{
	__u32 b = neigh_bucket(k), bc = LFP_STALE_BUCKETS + b;
	const __s64 *t = bpf_map_lookup_elem(&lfp_stale_filter, &b);
	const __s64 *c = bpf_map_lookup_elem(&lfp_stale_filter, &bc);

	return !t || !c || *t + *c != 0;
}

/* The set's key of fib's next hop. */
static __always_inline void neigh_key_of(struct lfp_neigh_key *nk, const struct bpf_fib_lookup *fib)
{
	nk->ifindex = fib->ifindex;
	nk->family = fib->family;
	if (fib->family == AF_INET) {
		nk->addr[0] = fib->ipv4_dst;
	} else {
		nk->addr[0] = fib->ipv6_dst[0];
		nk->addr[1] = fib->ipv6_dst[1];
		nk->addr[2] = fib->ipv6_dst[2];
		nk->addr[3] = fib->ipv6_dst[3];
	}
}

/* The set's entry for fib's next hop, or NULL: none, or the set cannot hold it (its bucket's
 * count is 0); *lost where an insert into the set was lost (then NULL: the set cannot tell). */
static __always_inline struct lfp_stale_val *neigh_stale_find(const struct lfp_config *cfg,
							       const struct bpf_fib_lookup *fib, int *lost)
{
	struct lfp_neigh_key nk = {};

	*lost = !cfg->stale_neighs && neigh_stale_lost();
	if (*lost)
		return NULL;
	neigh_key_of(&nk, fib);
	/* The controller keeps the set alone (cfg->stale_neighs: how many entries) where the
	 * tracepoints do not run, and counts no buckets. */
	if (!cfg->stale_neighs && !neigh_stale_maybe(&nk))
		return NULL;
	return bpf_map_lookup_elem(&lfp_stale, &nk);
}

/* bpf_fib_lookup() accepts any NUD_VALID neighbour. Linux, sending to a STALE one, moves it to
 * DELAY and later re-probes it; a fast path that never let Linux see a packet would keep using
 * a MAC nobody confirms. So the first packet to a STALE nexthop goes to Linux (which moves it to
 * DELAY) and marks the entry; later packets are forwarded with the cached MAC, as Linux does in
 * DELAY and PROBE. The neighbour table's tracepoints (bpf/netlink_watch.c) add an entry the
 * moment its neighbour becomes STALE and remove it the moment it leaves STALE; where they cannot
 * attach, the controller keeps the set from netlink events, a notification late. A STALE
 * neighbour the tracepoints could not add (the set is full) would be forwarded to without the
 * packet Linux needs: until the controller has written the set again, every packet to a
 * neighbour goes to Linux. Returns 0, or the reason the packet goes to Linux. */
static __always_inline int neigh_stale(const struct lfp_config *cfg, const struct bpf_fib_lookup *fib)
{
	struct lfp_stale_val *sv;
	int lost;

	sv = neigh_stale_find(cfg, fib, &lost);
	if (lost)
		return LFP_PASS_NEIGH_LOST;
	if (sv && !sv->kicked) {
		sv->kicked = 1;
		return LFP_PASS_NEIGH_STALE;
	}
	return 0;
}

/* Whether the set does not hold fib's next hop and no insert into it was lost: neigh_stale()
 * would return 0 for it, and changes nothing then. The FIB cache keeps this with an answer
 * (fibcache.h: every change of the set is followed by a move of the cache's generation). */
static __always_inline int neigh_not_stale(const struct lfp_config *cfg, const struct bpf_fib_lookup *fib)
{
	int lost;

	return !neigh_stale_find(cfg, fib, &lost) && !lost;
}

#endif
