/* The FIB cache's generation (struct lfp_fib_gen): moved on by the watchers, read by the data
 * plane's FIB cache (lib/fibcache.h). The controller loads the watchers with the data plane's
 * map. */
#ifndef LFP_FIBCACHE_MAP_H
#define LFP_FIBCACHE_MAP_H

#include "linuxfp_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fib_gen);
	__uint(max_entries, 1);
} lfp_fib_gen SEC(".maps");

#endif
