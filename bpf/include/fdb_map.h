/* The bridge FDB's moves, counted per bucket of (bridge, MAC): the map the bridge FDB watcher
 * (netlink_watch.c) writes and the data plane reads, in a header of its own so that both declare
 * it alike (the watcher is loaded with the data plane's map).
 *
 * The bridge moves, creates and deletes entries in its data path and timers, not over netlink:
 * the controller hears of it by notification, a few ms later, and meanwhile the fast path's
 * mirror (lfp_fdb, lib/fdb.h) would send frames to a moved address to its old port. So the
 * watcher counts each change, the moment the bridge makes it (after the entry's new port is
 * written), in the bucket of its (bridge, MAC). The controller reads the buckets before it
 * reads the FDB, and writes each mirror entry with its bucket's count as read (lfp_fdb_val.moved);
 * the data plane uses an entry only while its bucket still has that count. So a change the
 * controller's read may have missed makes the entry Linux's until an apply has read it, however
 * the apply and the change interleave (an apply that read the FDB just before a move and writes
 * just after it writes an entry that is already stale, and unused). Counters only grow and are
 * never reset, so no write of the controller can race with one of the watcher's: it needs no
 * compare-and-swap, and no removal. A move also makes the other entries of its bucket Linux's
 * until the next apply (which the move's notification brings) writes them with the new count. */
#ifndef LFP_FDB_MAP_H
#define LFP_FDB_MAP_H

#include "linuxfp_types.h"

#define LFP_FDB_MOVE_BUCKETS 4096

/* One count per bucket. The controller maps it (BPF_F_MMAPABLE) and reads each count with one
 * atomic load: a copy through the bpf() syscall could tear a count being added to. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LFP_FDB_MOVE_BUCKETS);
	__uint(map_flags, BPF_F_MMAPABLE);
} lfp_fdb_moves SEC(".maps");

/* The bucket of (bridge, mac). The controller computes the same (dataplane.fdbBucket). */
static __always_inline __u32 fdb_bucket(__u32 bridge, const __u8 *mac)
{
	__u32 h = bridge * 0x9e3779b1u;

	h ^= mac[0] | (__u32)mac[1] << 8 | (__u32)mac[2] << 16 | (__u32)mac[3] << 24;
	h *= 0x85ebca6bu;
	h ^= mac[4] | (__u32)mac[5] << 8;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h & (LFP_FDB_MOVE_BUCKETS - 1);
}

/* The count of bucket b now; all ones if it cannot be read (no entry written by the controller
 * has it). */
static __always_inline __u64 fdb_moves(__u32 b)
{
	__u64 *n = bpf_map_lookup_elem(&lfp_fdb_moves, &b);

	if (!n)
		return ~0ULL;
	return *(volatile __u64 *)n;
}

#endif
