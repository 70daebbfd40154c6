/* The FIB cache's generation (struct lfp_fib_gen): moved on by the watchers, read by the data
 * plane's FIB cache (lib/fibcache.h). The controller loads the watchers with the data plane's
 * map. */
#ifndef LFP_FIBCACHE_MAP_H
#define LFP_FIBCACHE_MAP_H

#include "linuxfp_types.h"

/* The cache keeps one answer per block of destinations (lib/fibcache.h says when one answer
 * holds for a whole block): an IPv4 /24, an IPv6 /64, the longest prefixes routes commonly
 * have. graph/fibcache.go holds the same numbers. */
#define LFP_FIB_BLOCK4 24
#define LFP_FIB_BLOCK6 64
/* Split blocks the data plane holds (lfp_fib_split); beyond, the controller turns the cache off. */
#define LFP_FIB_SPLIT_MAX 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fib_gen);
	__uint(max_entries, 1);
} lfp_fib_gen SEC(".maps");

#endif
