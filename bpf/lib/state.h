/* What every module reads for one packet: the runtime settings (lfp_config, written by the
 * controller) and per-CPU scratch space for what does not fit the 512-byte stack. */
#ifndef LFP_STATE_H
#define LFP_STATE_H

#include "ctx.h"
#include "linuxfp_types.h"
#include "filter.h"
#include "ct.h"
#include "vxlan.h"
#include "fibcache.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_config);
	__uint(max_entries, 1);
} lfp_config_map SEC(".maps");

static __always_inline struct lfp_config *lfp_config(void)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(&lfp_config_map, &key);
}

/* The filter's and the conntrack module's view of the packet, and what the router decided about
 * its way out. Per CPU: a program runs to its end on one CPU with bottom halves off, so no other
 * packet uses it meanwhile. One packet uses it once: the bridge module's netfilter step
 * (bridge_nf_ip) and the router never both run for one frame. */
struct lfp_scratch {
	struct fw_pkt fp;
	struct ct_pkt ct;
	/* The router's packet leaves through a vxlan device and is encapsulated here (vxlan.h). */
	__u32 vx_on;
	/* The router's packet is bridged back out of the bridge it came from, as br_netfilter does
	 * after a DNAT (router_bridged_dnat). */
	__u32 br_dnat;
	struct vxlan_plan vx;
	/* The vxlan device a VXLAN packet for this host is for (vxlan_rx). */
	struct lfp_vxlan_rx vxrx;
	/* What a decapsulated packet needs to be handed to Linux as it came (vxlan_undo). */
	struct vxlan_undo vxu;
	/* ct_l4_csum()'s buffer; vxlan_plan()'s outer route lookup. */
	__u8 buf[CT_CSUM_CHUNK + 4];
	__u64 ofib[sizeof(struct bpf_fib_lookup) / 8]; /* bytes: bpf2go cannot describe the struct */
	/* The FIB cache's lookups (fibcache.h). */
	struct fib_cache_scr fc;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_scratch);
	__uint(max_entries, 1);
} lfp_scratch_map SEC(".maps");

static __always_inline struct lfp_scratch *lfp_scratch(void)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(&lfp_scratch_map, &key);
}

#endif
