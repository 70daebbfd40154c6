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

/* The link unit is counted per device: for each device whose configuration changed (its MAC,
 * MTU, name, master, bridge port settings: bpf/netlink_watch.c), the count its last change was
 * given (all ones while it is being given one). While the unit has changes the data plane does
 * not follow yet, a packet that arrives on or would leave by such a device goes to Linux; the
 * other devices' packets go on (lib/gate.h). Entries are not removed: one whose count the data
 * plane follows is ignored; when the map is full, a change is counted in both families. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lfp_if_fence SEC(".maps");

#endif
