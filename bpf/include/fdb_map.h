/* The bridge FDB mirror (lib/fdb.h explains it), in a header of its own: the bridge FDB watcher
 * (netlink_watch.c) is loaded with the data plane's map and must declare it alike. */
#ifndef LFP_FDB_MAP_H
#define LFP_FDB_MAP_H

#include "linuxfp_types.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_fdb_key);
	__type(value, struct lfp_fdb_val);
	__uint(max_entries, 131072);
} lfp_fdb SEC(".maps");

#endif
