/* The neighbour module's STALE mirror (lib/neigh.h explains it), in a header of its own: the
 * neighbour tracepoints in netlink_watch.c are loaded with the data plane's maps and keep them. */
#ifndef LFP_NEIGH_MAP_H
#define LFP_NEIGH_MAP_H

#include "linuxfp_types.h"

/* The neighbours Linux holds STALE. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_neigh_key);
	__type(value, struct lfp_stale_val);
	__uint(max_entries, 65536);
} lfp_stale SEC(".maps");

/* How many entries lfp_stale holds, in two parts, each with one kind of writer: [0] the
 * tracepoints' (atomic adds), [1] the controller's (the entries it wrote when it started). The
 * data plane skips the lookup while the sum is 0, and hands every packet to a neighbour to Linux
 * while the tracepoints have lost more entries than the controller's last writing covered. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_stale_count);
	__uint(max_entries, 2);
} lfp_stale_count SEC(".maps");

#endif
