/* The neighbour table's STALE entries, mirrored: the packet that moves one to DELAY is Linux's. */
#ifndef LFP_NEIGH_H
#define LFP_NEIGH_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"

/* The neighbours Linux reports STALE, maintained from netlink events (see neigh_stale). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_neigh_key);
	__type(value, struct lfp_stale_val);
	__uint(max_entries, 65536);
} lfp_stale SEC(".maps");

/* bpf_fib_lookup() accepts any NUD_VALID neighbour. Linux, sending to a STALE one, moves it to
 * DELAY and later re-probes it; a fast path that never let Linux see a packet would keep using
 * a MAC nobody confirms. So the first packet to a STALE nexthop goes to Linux (which moves it to
 * DELAY: the kernel sends no event for that) and marks the entry; later packets are forwarded
 * with the cached MAC, as Linux does in DELAY and PROBE. The PROBE/REACHABLE/FAILED events that
 * follow remove the entry; the next STALE one adds it again, unmarked. Returns 1 when the packet
 * must go to Linux. */
static __always_inline int neigh_stale(const struct lfp_config *cfg, const struct bpf_fib_lookup *fib)
{
	struct lfp_neigh_key nk = {};
	struct lfp_stale_val *sv;

	if (!cfg->stale_neighs)
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
