/* Types shared between the eBPF data plane and the Go controller (bpf2go -type). */
#ifndef LINUXFP_TYPES_H
#define LINUXFP_TYPES_H

#include <linux/types.h>

/* Why a packet was handed to Linux (XDP_PASS), or that it was fast-pathed.
 * The Go side turns these into names with `go generate` (see
 * internal/dataplane/reasons.go); keep the two in the same order. */
enum lfp_reason {
	LFP_FORWARDED = 0,        /* fast-pathed: redirected by the router module */
	LFP_PASS_NOT_IP,          /* not IPv4/IPv6 (ARP, VLAN-tagged, LLDP ...) */
	LFP_PASS_NOT_FOR_US,      /* destination MAC is not the ingress device's */
	LFP_PASS_FAMILY_OFF,      /* family not accelerated on this interface */
	LFP_PASS_MALFORMED,       /* truncated or inconsistent header */
	LFP_PASS_IP_OPTIONS,      /* IPv4 options */
	LFP_PASS_FRAGMENT,        /* IPv4 fragment */
	LFP_PASS_BAD_CSUM,        /* IPv4 header checksum wrong */
	LFP_PASS_TTL,             /* TTL / hop limit <= 1 */
	LFP_PASS_MARTIAN_SRC,     /* source address Linux rejects or treats specially */
	LFP_PASS_MARTIAN_DST,     /* destination address Linux does not route as unicast */
	LFP_PASS_LOCAL_SRC,       /* source is a local / broadcast address of this host */
	LFP_PASS_V6_HOPOPTS,      /* IPv6 hop-by-hop options header */
	LFP_PASS_ICMP_ERROR,      /* ICMP error: multipath hashes on the inner header */
	LFP_PASS_FIB_NOT_FWDED,   /* no route, or a local/broadcast/multicast destination */
	LFP_PASS_FIB_BLACKHOLE,   /* blackhole route */
	LFP_PASS_FIB_UNREACHABLE, /* unreachable route */
	LFP_PASS_FIB_PROHIBIT,    /* prohibit route */
	LFP_PASS_FIB_FWD_DISABLED,/* forwarding disabled on the ingress device */
	LFP_PASS_FIB_UNSUPP_LWT,  /* route needs lightweight-tunnel encapsulation */
	LFP_PASS_FIB_NO_NEIGH,    /* neighbour not resolved */
	LFP_PASS_FIB_FRAG_NEEDED, /* larger than the egress MTU */
	LFP_PASS_FIB_OTHER,       /* any other bpf_fib_lookup result */
	LFP_PASS_ROUTE_MTU,       /* larger than some route's MTU metric (same family) */
	LFP_PASS_HAIRPIN,         /* egress == ingress: Linux may send a redirect */
	LFP_PASS_EGRESS_NOT_READY,/* egress device cannot take an XDP redirect */
	LFP_PASS_NEIGH_STALE,     /* neighbour STALE: Linux must see a packet to re-probe */
	LFP_PASS_SCTP_OFFLOAD,    /* SCTP from a veth peer that may leave its CRC to offload */
	LFP_REASON_MAX,
};

/* Counters for one (interface slot, reason). Per-CPU. */
struct lfp_counter {
	__u64 packets;
	__u64 bytes;
};

/* Key of the STALE-neighbour set: the nexthop bpf_fib_lookup resolved. */
struct lfp_neigh_key {
	__u32 ifindex;
	__u32 family;   /* AF_INET or AF_INET6 */
	__u32 addr[4];  /* IPv4 in addr[0]; network byte order */
};

/* Value of the STALE-neighbour set. The controller writes 0; the data plane sets kicked once it
 * has handed Linux the packet that moves the entry from STALE to DELAY. */
struct lfp_stale_val {
	__u32 kicked;
};

/* LPM key for prefixes of local addresses (IPv4 and IPv6 share the layout). */
struct lfp_lpm_key {
	__u32 prefixlen;
	__u32 addr[4];
};

/* Data that changes without changing the graph: read per packet. */
struct lfp_config {
	/* Smallest MTU metric on any IPv4 / IPv6 route (0: none). Linux's forwarding
	 * honours an unlocked route MTU; bpf_fib_lookup does not. */
	__u32 route_mtu4;
	__u32 route_mtu6;
	/* Non-host local routes exist (ip route add local 198.18.0.0/16 ...):
	 * consult the LPM map as well as the host hash. */
	__u32 local_prefixes4;
	__u32 local_prefixes6;
	/* Entries in lfp_stale (0: skip the lookup). */
	__u32 stale_neighs;
};

#define LFP_MAX_SLOTS 256

#endif
