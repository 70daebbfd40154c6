/* Classes of configuration change bpf/netlink_watch.c tells apart (bpf2go -type gives Go the
 * same names). */
#ifndef LFP_NETLINK_WATCH_H
#define LFP_NETLINK_WATCH_H

enum lfp_nl_class {
	LFP_NL_NONE = 0,  /* not a change (a GET, another subsystem) */
	LFP_NL_LINK,      /* RTM_{NEW,DEL,SET}LINK */
	LFP_NL_ADDR,
	LFP_NL_ROUTE,     /* routes, policy rules, nexthop objects */
	LFP_NL_NEIGH,     /* neighbours and bridge FDB entries (AF_BRIDGE RTM_NEWNEIGH) */
	LFP_NL_TC,        /* qdiscs, classes, filters, chains */
	LFP_NL_OTHER,     /* any other rtnetlink change (netconf, mdb, vlan ...) */
	LFP_NL_NFTABLES,  /* an nf_tables batch (iptables-nft, nft) */
	LFP_NL_IPSET,     /* ipset create, destroy, flush, rename, swap, add, del */
	LFP_NL_CLASSES,
};

/* One ring record per request that changed something: which classes of change it made (bits
 * 1 << enum lfp_nl_class) and, per fence unit (enum lfp_fence_unit; the sysctl unit is never
 * set here), the count this request's change was given (0: not counted in that unit). The
 * controller opens a unit only up to counts whose records it has taken in, so that no change is
 * let through before the controller knows what to read for it. */
struct lfp_nl_event {
	__u32 classes;
	__u32 pad;
	__u64 seq[4];
};

/* How many ipset names the watcher can be told to fence (lfp_nl_sets). */
#define LFP_NL_SETS 1024

#endif
