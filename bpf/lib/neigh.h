/* The neighbour table's STALE entries, mirrored: the packet that moves one to DELAY is Linux's. */
#ifndef LFP_NEIGH_H
#define LFP_NEIGH_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"
#include "neigh_map.h"

/* Whether the neighbour tracepoints (bpf/netlink_watch.c) keep entries in lfp_stale. */
static __always_inline int neigh_stale_any(void)
{
	__u32 k0 = 0, k1 = 1;
	const __s64 *a = bpf_map_lookup_elem(&lfp_stale_count, &k0);
	const __s64 *b = bpf_map_lookup_elem(&lfp_stale_count, &k1);

	return a && b && *a + *b != 0;
}

/* bpf_fib_lookup() accepts any NUD_VALID neighbour. Linux, sending to a STALE one, moves it to
 * DELAY and later re-probes it; a fast path that never let Linux see a packet would keep using
 * a MAC nobody confirms. So the first packet to a STALE nexthop goes to Linux (which moves it to
 * DELAY) and marks the entry; later packets are forwarded with the cached MAC, as Linux does in
 * DELAY and PROBE. The neighbour table's tracepoints (bpf/netlink_watch.c) add an entry the
 * moment its neighbour becomes STALE and remove it the moment it leaves STALE; where they cannot
 * attach, the controller keeps the set from netlink events, a notification late. Returns 1 when
 * the packet must go to Linux. */
static __always_inline int neigh_stale(const struct lfp_config *cfg, const struct bpf_fib_lookup *fib)
{
	struct lfp_neigh_key nk = {};
	struct lfp_stale_val *sv;

	if (!cfg->stale_neighs && !neigh_stale_any())
		return 0;
	nk.ifindex = fib->ifindex;
	nk.family = fib->family;
	if (fib->family == AF_INET) {
		nk.addr[0] = fib->ipv4_dst;
	} else {
		nk.addr[0] = fib->ipv6_dst[0];
		nk.addr[1] = fib->ipv6_dst[1];
		nk.addr[2] = fib->ipv6_dst[2];
		nk.addr[3] = fib->ipv6_dst[3];
	}
	sv = bpf_map_lookup_elem(&lfp_stale, &nk);
	if (sv && !sv->kicked) {
		sv->kicked = 1;
		return 1;
	}
	return 0;
}

#endif
