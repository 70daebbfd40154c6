/* Where the conntrack cache (lib/ct.h) learns that an entry it keeps the address of was freed:
 * the watcher's tp_btf programs on kmem_cache_free (netlink_watch.c) move the counter of the
 * slot the freed object's address falls in, before the slab takes the object back; the data
 * plane uses a kept address only while its slot's counter is the one it read when it held the
 * entry. The controller loads the watcher with the data plane's map. */
#ifndef LFP_CT_FREES_MAP_H
#define LFP_CT_FREES_MAP_H

#include "linuxfp_types.h"

#define LFP_CT_FREE_SHIFT 10

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1 << LFP_CT_FREE_SHIFT);
} lfp_ct_frees SEC(".maps");

/* The slot of an object's address: its bits above the cache line mixed by a multiplication. */
static __always_inline __u32 lfp_ct_free_slot(__u64 addr)
{
	return (__u32)(((addr >> 6) * 0x9e3779b97f4a7c15ULL) >> (64 - LFP_CT_FREE_SHIFT));
}

#endif
