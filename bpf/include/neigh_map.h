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

/* The set's losses, in two parts, each with one kind of writer: [0] the tracepoints' (atomic
 * adds), [1] the controller's. The data plane hands every packet to a neighbour to Linux while
 * the tracepoints have lost more entries than the controller's last writing covered. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_stale_count);
	__uint(max_entries, 2);
} lfp_stale_count SEC(".maps");

/* The controller's part when its last writing did not fit in the set: no count of losses equals
 * it, so every packet to a neighbour goes to Linux until a writing fits. */
#define LFP_STALE_NOT_COVERED ((__u64)-1)

/* How many entries lfp_stale holds in each bucket (neigh_bucket()), in two parts, each with one
 * kind of writer: [b] the tracepoints' (atomic adds), [LFP_STALE_BUCKETS + b] the controller's
 * (the entries it wrote). A neighbour whose bucket's parts sum to 0 is not in the set, and the
 * data plane skips the hash lookup: some neighbour is STALE nearly always (a host not talked to
 * lately), and the lookup cost every routed packet ~10 ns on the AMD VM (three calls, each return
 * mispredicted under safe-RET), these two inlined array lookups ~2. A writer counts an entry
 * before it adds it and uncounts it after it removed it, or failed to add it. One part may go
 * below 0: the tracepoints remove entries the controller wrote. */
#define LFP_STALE_BUCKETS 4096

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __s64);
	__uint(max_entries, 2 * LFP_STALE_BUCKETS);
} lfp_stale_filter SEC(".maps");

/* The bucket of a neighbour key. The controller computes the same (dataplane.neighBucket). */
static __always_inline __u32 neigh_bucket(const struct lfp_neigh_key *k)
{
	__u32 h = k->ifindex * 0x9e3779b1u;

	h = (h ^ k->addr[0]) * 0x85ebca6bu;
	h = (h ^ k->addr[1]) * 0xc2b2ae35u;
	h = (h ^ k->addr[2]) * 0x9e3779b1u;
	h = (h ^ k->addr[3]) * 0x85ebca6bu;
	return h >> 20;
}

#endif
