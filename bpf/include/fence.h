/* The fence: per unit (a family), how many configuration changes Linux has applied. The netlink
 * watcher (bpf/netlink_watch.c) and the sysctl watcher count them as they are made, before the
 * command that made them returns; the controller, once it has read Linux's state and brought the
 * data plane to it, writes in lfp_gate.done the count it read before reading. While the two
 * differ, the unit's packets go to Linux (lib/gate.h). Shared by the watchers and the data
 * plane: the controller loads the watchers with the data plane's map. */
#ifndef LFP_FENCE_H
#define LFP_FENCE_H

#include "linuxfp_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fence);
	__uint(max_entries, 1);
} lfp_fence_map SEC(".maps");

#endif
