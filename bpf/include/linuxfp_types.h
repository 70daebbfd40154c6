/* Types shared between the eBPF data plane and the Go controller (bpf2go -type). */
#ifndef LINUXFP_TYPES_H
#define LINUXFP_TYPES_H

#include <linux/types.h>

/* A setting: what a program is specialised for, a frozen .rodata constant (cfg_<name>) the
 * verifier prunes by. Each is declared once, with its module; the Go side is generated from the
 * declarations (internal/dataplane/settings_gen.go: the "lfp_setting" tag marks them in the
 * object's BTF, the description becomes the Go field's comment), and a program kind is the
 * values of all of them. */
#define LFP_SETTING(type, name, init, description)                                  \
	__attribute__((btf_decl_tag("lfp_setting"), btf_decl_tag(description)))  \
	volatile const type cfg_##name = init

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
	LFP_BRIDGED,              /* fast-pathed: switched to another port by the bridge module */
	LFP_PASS_BR_PORT_STATE,   /* ingress port not in STP forwarding state */
	LFP_PASS_BR_CONFIG,       /* a bridge or port option Linux handles (see linuxfp status) */
	LFP_PASS_BR_FLOOD,        /* broadcast / multicast / link-local group: Linux floods or delivers */
	LFP_PASS_BR_SRC_UNKNOWN,  /* source MAC not learned on the ingress port: Linux learns it */
	LFP_PASS_BR_DST_UNKNOWN,  /* destination MAC not in the FDB: Linux floods */
	LFP_PASS_BR_LOCAL,        /* to a local FDB entry other than the bridge's own MAC */
	LFP_PASS_BR_EGRESS,       /* destination port: same as ingress, not forwarding, isolated, MTU */
	LFP_PASS_BR_NETFILTER,    /* br_netfilter would pass the bridged packet through iptables rules */
	LFP_FILTER_DROPPED,       /* fast-pathed: dropped at XDP by a netfilter rule or policy */
	LFP_PASS_FILTER,          /* a netfilter rule Linux must evaluate may decide (see status) */
	LFP_PASS_FILTER_HEADERS,  /* headers the filter does not parse (IPv6 extension, short L4) */
	LFP_PASS_GSO,             /* TC: a GSO train whose segments' size cannot be checked (not TCP) */
	LFP_PASS_CT_NEW,          /* conntrack: no entry (a new connection): Linux decides it */
	LFP_PASS_CT_NAT,          /* conntrack: the connection is translated (NAT) */
	LFP_PASS_CT_STATE,        /* conntrack: the packet or entry moves or has state Linux keeps */
	LFP_PASS_CT_LIBERAL,      /* conntrack: TCP entry not yet liberal (asked for; see ct.h) */
	LFP_PASS_CT_PROTO,        /* conntrack: not TCP or UDP */
	LFP_ENCAPSULATED,         /* fast-pathed: routed into a vxlan device, encapsulated here */
	LFP_PASS_ENCAP,           /* VXLAN encapsulation failed (no room): Linux */
	LFP_DECAPSULATED,         /* fast-pathed: a VXLAN packet for a local device, decapsulated here */
	LFP_PASS_VXLAN,           /* a VXLAN packet for a local device that vxlan_rcv() must see */
	LFP_PASS_CT_INVALID,      /* conntrack would find the packet INVALID (bad header, flags, length) */
	LFP_PASS_CT_CHECKSUM,     /* conntrack would verify its L4 checksum (nf_conntrack_checksum) */
	LFP_TO_TC,                /* XDP: handed, marked, to the interface's tc program (see bpf/lib/stats.h) */
	LFP_PASS_RELOADING,       /* built without a module the configuration now needs; its replacement is loading */
	LFP_PASS_APPLY_FAILED,    /* the data plane could not be brought to Linux's configuration for this family */
	LFP_PASS_FENCED,          /* Linux has applied a change of this family's configuration the data plane does not follow yet */
	LFP_PASS_MULTI_BUFFER,    /* XDP: a frame in several buffers (jumbo frame, GRO train): Linux */
	LFP_PASS_BR_REFRESH,      /* a learned source's frame, once per interval: Linux's bridge refreshes its FDB entry */
	LFP_PASS_NEIGH_LOST,
	LFP_PASS_CT_ACCT,         /* conntrack: the entry counts packets and bytes (nf_conntrack_acct, connbytes) */
	LFP_PASS_CT_TIMEOUT,      /* conntrack: the entry has a timeout policy of its own (ct timeout, CT --timeout) */      /* the STALE-neighbour mirror lost an entry (full): Linux until it is written again */
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

/* One writer's part of the STALE-neighbour set's losses (include/neigh_map.h): the tracepoints'
 * part counts the STALE neighbours they could not add (the set was full); the controller's part
 * holds the count its last complete writing of the set covered. */
struct lfp_stale_count {
	__u64 lost;
};

/* LPM key for prefixes of local addresses (IPv4 and IPv6 share the layout). */
struct lfp_lpm_key {
	__u32 prefixlen;
	__u32 addr[4];
};

/* Flags of struct lfp_config, named so that they reach Go (bpf2go -type), as do the other
 * flag enums below: a struct field of the enum's type puts it in the object's BTF. */
enum lfp_ct_flags {
	LFP_CT_ACTIVE4     = 1 << 0, /* netfilter tracks forwarded IPv4 connections (NAT rules) */
	LFP_CT_ACTIVE6     = 1 << 1,
	LFP_CT_TCP_LIBERAL = 1 << 2, /* nf_conntrack_tcp_be_liberal=1 */
	LFP_CT_NAT4        = 1 << 3, /* translate IPv4 connections (no rule on prerouting/postrouting) */
	LFP_CT_CHECKSUM    = 1 << 4, /* nf_conntrack_checksum=1: conntrack verifies L4 checksums */
	LFP_CT_NAT6        = 1 << 5, /* translate IPv6 connections (no rule on prerouting/postrouting) */
	LFP_CT_CACHE       = 1 << 6, /* the conntrack cache may answer: its entries' frees are seen (ct_frees_map.h) */
};

enum lfp_vx_flags {
	LFP_VX_LOCAL_OUT4 = 1 << 0, /* no rule (but nat chains') sees IPv4 packets this host sends */
	LFP_VX_LOCAL_IN4  = 1 << 1, /* no rule (but nat chains') sees IPv4 packets this host receives */
	LFP_VX_HOPLIMIT4  = 1 << 2, /* some IPv4 route has a hoplimit metric */
};

enum lfp_fw_flags {
	LFP_FW_ACTIVE4   = 1 << 0, /* classify IPv4 (a non-empty ruleset) */
	LFP_FW_ACTIVE6   = 1 << 1,
	LFP_FW_CUT_SRC4  = 1 << 2, /* leaves are selected by the source address (else destination) */
	LFP_FW_CUT_SRC6  = 1 << 3,
	LFP_FW_HAS_MARK4 = 1 << 4, /* mark matches were folded assuming mark 0 */
	LFP_FW_HAS_MARK6 = 1 << 5,
	/* Some rule tests the conntrack state: packets conntrack did not look up go to Linux. */
	LFP_FW_HAS_CTSTATE4 = 1 << 6,
	LFP_FW_HAS_CTSTATE6 = 1 << 7,
	/* A rule before conntrack (raw) drops: a packet's conntrack entry is refreshed only once
	 * the classification says no such rule dropped it (ct_refresh()). */
	LFP_FW_PRE_CT_DROP4 = 1 << 8,
	LFP_FW_PRE_CT_DROP6 = 1 << 9,
	/* `fib saddr|daddr type local` was folded as "not local": packets whose source /
	 * destination may be local (lib/local.h) go to Linux. */
	LFP_FW_FIB_SRC4 = 1 << 10,
	LFP_FW_FIB_SRC6 = 1 << 11,
	LFP_FW_FIB_DST4 = 1 << 12,
	LFP_FW_FIB_DST6 = 1 << 13,
	/* Some rule tests the input or output interface (else their bits are not looked up). */
	LFP_FW_HAS_IF4 = 1 << 14,
	LFP_FW_HAS_IF6 = 1 << 15,
	/* The cut has /0 (and, IPv6, no prefix lfp_fw_short_filter cannot hold): an address not
	 * in lfp_fw_hosts (nor, with LFP_FW_SHORT*, in lfp_fw_short_filter) takes fw_default_leaf
	 * without a lookup in the LPM trie. */
	LFP_FW_DEFAULT_LEAF4 = 1 << 16,
	LFP_FW_DEFAULT_LEAF6 = 1 << 17,
	/* The cut has prefixes shorter than an address besides /0 (lfp_fw_short_filter). */
	LFP_FW_SHORT4 = 1 << 18,
	LFP_FW_SHORT6 = 1 << 19,
};

enum lfp_fib_flags {
	LFP_FIB_CACHE4 = 1 << 0, /* the FIB cache may answer for IPv4 (lib/fibcache.h) */
	LFP_FIB_CACHE6 = 1 << 1,
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
	/* Bridges in lfp_l2 (0: a routed packet's egress cannot be a bridge; skip the lookup). */
	__u32 bridges;
	/* Filter module: the active bank of lfp_fw_rules/leaves/lpm, and LFP_FW_* flags. */
	__u32 fw_bank;
	enum lfp_fw_flags fw_flags;
	/* Conntrack module: LFP_CT_* flags, and the netns's nf_conntrack_* timeouts (ms) that
	 * tcp_packet() and udp_packet() refresh established entries to. */
	enum lfp_ct_flags ct_flags;
	__u32 ct_tcp_established_ms;
	__u32 ct_tcp_close_wait_ms;
	__u32 ct_tcp_unack_ms;
	__u32 ct_tcp_retrans_ms;
	__u32 ct_tcp_max_retrans;
	__u32 ct_udp_stream_ms;
	__u32 ct_udp_ms;
	/* VXLAN: vxlan devices in lfp_vxlan (0: skip the lookup), LFP_VX_* flags, and what a
	 * locally built IPv4 packet gets: net.ipv4.ip_default_ttl. */
	__u32 vxlans;
	enum lfp_vx_flags vx_flags;
	__u32 default_ttl;
	/* Filter module: index of the active bank's first rule and leaf in lfp_fw_rules,
	 * lfp_fw_leaves and lfp_fw_stats (fw_bank times the capacity the maps were made with). */
	__u32 fw_base;
	/* Per family, with LFP_FW_DEFAULT_LEAF*: the leaf (bank-relative) of the cut's /0. */
	__u32 fw_default_leaf[2];
	/* Filter module, per family: the conntrack states (LFP_CT_STATE_* bits) no rule can match
	 * (compile.Program.CtNoRule). */
	__u8 fw_ct_none[2];
	__u8 fw_pad[2];
	/* net.ipv4.ip_forward_update_priority: ip_forward() sets the skb priority from the TOS
	 * (tc: a redirected skb keeps it into the egress qdisc). */
	__u32 fwd_update_prio4;
	/* FIB cache module: the families it answers for (LFP_FIB_*). */
	enum lfp_fib_flags fib_flags;
};

/* A vxlan device the fast path encapsulates for (bpf/lib/vxlan.h): the parts of its
 * configuration that make the outer headers. */
struct lfp_vxlan_dev {
	__u32 vni;      /* host byte order */
	__u32 local;    /* outer source address, network byte order */
	__u16 port;     /* destination UDP port, network byte order */
	__u16 port_min; /* source port range, host byte order (the netns's when unset) */
	__u16 port_max;
	__u8 ttl;       /* 0: the route's (net.ipv4.ip_default_ttl: no route has a hoplimit) */
	__u8 tos;       /* 1: inherit the inner one */
	__u8 udpcsum;   /* the outer UDP checksum is computed (udpcsum) */
	__u8 pad;
};

/* A vxlan device the fast path decapsulates for, by (UDP port, VNI): what vxlan_rcv() finds. */
struct lfp_vxlan_rx_key {
	__u16 port; /* network byte order */
	__u16 pad;
	__u32 vni;  /* host byte order */
};

struct lfp_vxlan_rx {
	__u32 dev;
	__u32 local; /* the device's local address, network byte order */
	__u8 mac[6]; /* the device's MAC (vxlan_rcv() drops frames from it: loops) */
	__u16 pad;
};

/* One remote of a vxlan device's forwarding database (bridge fdb ... dev vxlan0 dst X). */
struct lfp_vxfdb_key {
	__u32 dev;
	__u8 mac[6];
	__u16 pad;
};

struct lfp_vxfdb_val {
	__u32 dst;  /* network byte order */
	__u32 vni;  /* host byte order */
	__u16 port; /* network byte order */
	__u16 pad;
};

/* What the encapsulation reads of a vxlan device and of the remote its forwarding database
 * names for an inner destination MAC (lib/vxlan.h): the maps' values, as the FIB cache keeps
 * them with a route's answer. */
struct lfp_vx_remote {
	struct lfp_vxlan_dev dev;
	struct lfp_vxfdb_val fdb;
};

/* The tc program after an interface's XDP program (bpf/lib/stats.h): attached or not, and when
 * the XDP program last asked for it (ring buffer record lfp_tc_request). */
struct lfp_tc_companion {
	__u32 attached;
	__u32 pad;
	__u64 asked;
};

struct lfp_tc_request {
	__u32 ifindex;
	__u32 slot;
};

/* The packet monitor (lib/monitor.h). Flags of struct lfp_monitor: which packets to report. */
enum lfp_monitor_flags {
	LFP_MON_PASS = 1 << 0, /* handed to Linux */
	LFP_MON_DROP = 1 << 1, /* dropped */
};

/* Written only by the controller: all zero while no monitor is connected. */
struct lfp_monitor {
	enum lfp_monitor_flags flags;
	__u32 snaplen; /* the most packet bytes an event carries */
};

/* A reported packet (perf event), followed by its first caplen bytes. */
struct lfp_monitor_event {
	__u64 time_ns;  /* bpf_ktime_get_boot_ns() */
	__u32 ifindex;  /* ingress */
	__u32 len;      /* the packet's length */
	__u32 caplen;   /* bytes that follow */
	__u16 reason;   /* enum lfp_reason */
	__u8 flags;     /* LFP_MON_PASS or LFP_MON_DROP */
	__u8 tc;        /* 1: the tc program reported it, 0: XDP */
};

/* Ring buffer record (and rate-limit key): make this TCP connection's tracking liberal. The
 * tuple is the packet's, in direction dir of the entry (0 original, 1 reply). */
struct lfp_ct_req {
	__u8 family;
	__u8 proto;
	__u8 dir;
	__u8 pad;
	__u32 src[4];
	__u32 dst[4];
	__u16 sport; /* network byte order */
	__u16 dport;
};

/* Filter module (bpf/lib/filter.h, internal/filter/compile): limits, test kinds, actions. */
#define LFP_FW_MAX_TESTS 8
#define LFP_FW_MAX_LEAF  64
#define LFP_FW_MAX_RULES 16384 /* per bank, both families, unless the controller sizes the maps */
#define LFP_FW_MAX_SKIPS 16

enum { LFP_FW_ACCEPT = 0, LFP_FW_DROP = 1, LFP_FW_LINUX = 2 };
/* With LFP_FW_DROP: the rule that dropped runs before conntrack. */
#define LFP_FW_PRE_CT 4
enum { LFP_FW_ACT_DROP = 1, LFP_FW_ACT_LINUX = 2, LFP_FW_ACT_SKIP = 3 };
enum {
	LFP_FW_TEST_SRC = 1, LFP_FW_TEST_DST, LFP_FW_TEST_PROTO, LFP_FW_TEST_SPORT, LFP_FW_TEST_DPORT,
	LFP_FW_TEST_ICMP, LFP_FW_TEST_IIF, LFP_FW_TEST_OIF, LFP_FW_TEST_SET,
	LFP_FW_TEST_CTSTATE = 11, /* the packet's state bit (LFP_CT_STATE_*) is in a */
};
/* Conntrack states (nftables' ct state bits, internal/filter/model's Ct*). */
#define LFP_CT_STATE_INVALID     1
#define LFP_CT_STATE_ESTABLISHED 2
#define LFP_CT_STATE_RELATED     4
#define LFP_CT_STATE_NEW         8
/* TestSet flags in b. */
#define LFP_FW_SET_ADDR_SRC 1
#define LFP_FW_SET_PORT_SRC 2
#define LFP_FW_SET_HAS_PORT 4
#define LFP_FW_SET_HASH_IP  8 /* address masked to mask[]; zero never matches */
#define LFP_FW_SET_HOSTS    16 /* every entry of the set is full-length (lfp_fw_set_filter) */

struct lfp_fw_test {
	__u8 kind;
	__u8 inv;
	__u16 a, b;
	__u16 pad;
	__u32 addr[4]; /* network byte order, masked */
	__u32 mask[4];
};

struct lfp_fw_rule {
	__u8 ntests;
	__u8 action;
	__u8 pre_ct; /* the rule's chain runs before conntrack (compile.Rule.PreCT) */
	__u8 pad;
	__u32 skip_to;
	struct lfp_fw_test t[LFP_FW_MAX_TESTS];
};

struct lfp_fw_leaf {
	__u32 n;
	__u32 overflow;
	/* 1 + the index in the first rule of a test every rule of the leaf has, on a set of
	 * full-length entries (LFP_FW_SET_HOSTS): where its key's bit is clear in lfp_fw_set_filter,
	 * no rule of the leaf matches. 0: none. */
	__u32 guard;
	__u32 rules[LFP_FW_MAX_LEAF];
};

struct lfp_fw_lpm_key {
	__u32 prefixlen; /* 32 (sel) + address prefix length */
	__u32 sel;       /* bank << 8 | family (0 IPv4, 1 IPv6) */
	__u32 addr[4];
};

/* Full-length (/32, /128) cut prefixes: an exact match is the longest, and a hash lookup costs
 * the same however many there are, where the LPM trie grows deeper with every host route. */
struct lfp_fw_host_key {
	__u32 sel; /* as in lfp_fw_lpm_key */
	__u32 addr[4];
};

struct lfp_fw_set_key {
	__u32 prefixlen; /* 64 + address prefix length */
	__u32 set;       /* the kernel's set index */
	__u8 proto;
	__u8 pad;
	__u16 port;      /* host byte order */
	__u32 addr[4];
};

struct lfp_fw_if {
	__u64 bits[2]; /* the interface-pattern bits of the IPv4 and the IPv6 ruleset */
};

/* Bridge module: the mirror of Linux's forwarding databases. Only VLAN 0 entries: on a bridge
 * without vlan_filtering every lookup uses VLAN 0 (bridges with it are Linux's). */
struct lfp_fdb_key {
	__u32 bridge; /* ifindex of the bridge device */
	__u8 mac[6];
	__u16 pad;
};

enum lfp_fdb_flags : __u16 {
	LFP_FDB_LOCAL = 1, /* local entry (NUD_PERMANENT): the bridge's own addresses */
};

struct lfp_fdb_val {
	__u32 port;    /* ifindex of the port (the bridge itself for some local entries) */
	enum lfp_fdb_flags flags; /* two bytes: a fixed underlying type, as lfp_if_flags */
	__u16 bucket;  /* fdb_bucket() of its key, computed by the controller (fdb_map.h) */
	__u64 seen;    /* written by the data plane: its last refresh, as lfp_fdb_slot.seen (generation 0) */
	__u64 moved;   /* its bucket's count of moves when the controller read it (fdb_map.h) */
};

/* One slot of the FDB mirror's direct-mapped copy (lib/fdb.h, fdb_slot_get): the entry of
 * (bridge, mac) whose fdb_slot_of() is the slot, if the controller put it there. The controller
 * rewrites a slot in place through a shared mapping, one 8-byte word at a time, and each word
 * carries the slot's generation in its low 16 bits: a reader that finds the same generation in
 * all four has read one write's entry, on any CPU's memory ordering (an aligned 8-byte load is
 * never torn). */
struct lfp_fdb_slot {
	__u64 mac;    /* the MAC (byte 0 lowest) << 16 | generation */
	__u64 bridge; /* bridge ifindex << 32 | enum lfp_fdb_flags << 16 | generation (bridge 0: empty) */
	__u64 port;   /* port ifindex << 32 | fdb_bucket() of the key << 16 | generation */
	__u64 moved;  /* lfp_fdb_val.moved's low 48 bits << 16 | generation */
	__u64 seen;   /* written by the data plane: jiffies of its last refresh << 16 | the generation refreshed */
};

enum lfp_l2_flags {
	LFP_L2_BRIDGE     = 1 << 0, /* a bridge device: routed packets to it go through its FDB */
	LFP_L2_FORWARDING = 1 << 1, /* port in STP forwarding state */
	LFP_L2_IN_OK      = 1 << 2, /* port: no bridge/port option Linux handles for received frames */
	LFP_L2_OUT_OK     = 1 << 3, /* bridge: nothing on its own transmit path (tc, qdisc, nft) */
	LFP_L2_LEARNING   = 1 << 4, /* port learns source addresses: the fast path refreshes them */
	LFP_L2_ISOLATED   = 1 << 5, /* port isolated: no forwarding to another isolated port */
	LFP_L2_NF4        = 1 << 6, /* br_netfilter sees bridged IPv4 (call-iptables): validate, trim */
	LFP_L2_NF6        = 1 << 7, /* br_netfilter sees bridged IPv6 (call-ip6tables) */
	LFP_L2_IP4_OFF    = 1 << 8, /* bridged IPv4 goes to Linux (iptables rules could see it) */
	LFP_L2_IP6_OFF    = 1 << 9, /* bridged IPv6 goes to Linux */
};

/* A bridge device or bridge port, by ifindex. */
struct lfp_l2_dev {
	__u32 bridge; /* the bridge's ifindex (its own, for a bridge) */
	enum lfp_l2_flags flags;
	__u32 mtu;    /* largest L3 packet it transmits without dropping or fragmenting */
	/* The bridge's MAC (frames to it are routed). Data, not a frozen constant: a bridge's MAC
	 * follows its ports' unless set, and changing it must not reload every port's program. */
	__u8 br_mac[6];
	__u16 pad;
};

/* TC hook: a device a redirected skb may leave by (bpf/lib/tx.h). */
enum lfp_tx_flags {
	LFP_TX_PEER = 1, /* a veth into another namespace: deliver with bpf_redirect_peer() */
	LFP_TX_OK = 2,   /* an entry: the device takes redirected skbs (an array's zero entry is none) */
};

struct lfp_tc_tx {
	enum lfp_tx_flags flags;
	__u32 peer_mtu; /* LFP_TX_PEER: the peer's MTU */
};

#define LFP_MAX_SLOTS 256

/* An interface's own data (bpf/lib/iface.h): what is not the same for every interface whose
 * program has the same modules, so that one verified program serves all of them. */
enum lfp_if_flags : __u8 {
	LFP_IF_VALID = 1,
	/* Packets may carry a mark (a veth whose peer is in this namespace: skbs of its stack);
	 * elsewhere (a NIC, another namespace) the mark is 0 at XDP. */
	LFP_IF_MARK_UNSAFE = 2,
};

struct lfp_if {
	__u8 mac[6];     /* the MAC Linux routes frames for: the device's (not used on a bridge port) */
	enum lfp_if_flags flags; /* one byte: a fixed underlying type (C23, a clang extension before) */
	__u8 pad;
	__u32 slot;      /* row of lfp_stats and lfp_tc_companions */
	__u32 l3_ifindex;/* bridge port: the bridge (br_pass_frame_up() hands frames up from it) */
};

/* The gate (lib/gate.h): families whose packets all go to Linux because the controller could
 * not bring the data plane to Linux's configuration for them, and how far it has followed the
 * changes the fence counts (include/fence.h). */
enum {
	LFP_GATE_IPV4 = 1 << 0,
	LFP_GATE_IPV6 = 1 << 1,
};

/* The fence's units (include/fence.h): changes of one family's configuration, sysctl writes
 * (both families'; the controller tells the ones that matter from the others), and changes of
 * what the data plane holds of a device (per device: lfp_if_fence). */
enum lfp_fence_unit {
	LFP_FENCE_IPV4 = 0,
	LFP_FENCE_IPV6 = 1,
	LFP_FENCE_SYSCTL = 2,
	LFP_FENCE_LINK = 3,
	LFP_FENCE_UNITS,
};

/* Changes counted per unit; written only by the watchers (atomic adds). */
struct lfp_fence {
	__u64 seq[LFP_FENCE_UNITS];
};

/* Written only by the controller. */
struct lfp_gate {
	__u32 failed; /* LFP_GATE_* */
	__u32 pad;
	/* Per fence unit: the count of changes the data plane follows. */
	__u64 done[LFP_FENCE_UNITS];
	/* Moved on each time the gate is written: part of the FIB cache's generation (struct
	 * lfp_fib_gen), for changes the watchers see before they take effect (sysctls). */
	__u64 fib_epoch;
};

/* The FIB cache's generation per family (lib/fibcache.h), moved on by the watchers after each
 * change that can alter what bpf_fib_lookup() answers: netlink requests for links, addresses,
 * routes, rules and neighbours, and the neighbour table's own changes (tracepoints). Atomic
 * adds only; the controller's part is lfp_gate.fib_epoch. */
struct lfp_fib_gen {
	__u64 gen[2]; /* IPv4, IPv6 */
	/* Set by the controller while the cache may answer: the netlink watcher then counts every
	 * new route longer than a block (include/fibcache_map.h), so that no block is answered for
	 * as a whole before the controller has written the blocks such routes split. */
	__u32 count_long;
	__u32 pad;
};

/* What bpf_fib_lookup() is asked, as far as its answer depends on it where the cache is used
 * (graph/fibcache.go says when: no policy rules, no multipath), and the part of its answer the
 * fast path uses. */
struct lfp_fib_key {
	__u32 ifindex; /* the device Linux routes the packet from */
	__u32 flow;    /* IPv4: the TOS; IPv6: traffic class and flow label */
	__u32 dst[4];  /* the destination's block, or the destination itself (IPv4: dst[0]) */
	__u8 family;
	__u8 one;      /* dst is one destination, not a block */
	__u8 pad[2];
};

/* lfp_fib_entry.flags */
#define LFP_FIB_PER_DST 1 /* the block's answers differ per destination: look up the destination's */
#define LFP_FIB_VX_OK 2   /* vx holds the egress vxlan device's data and its remote for dmac */

/* An answer, laid out so that with its key (struct lfp_fib_way) all an IPv4 answer needs is in
 * the place's first 64 bytes, one cache line (lib/fibcache.h); what only IPv6 answers and
 * encapsulated packets read is in the second. rt_metric is not kept: no module reads it. */
struct lfp_fib_entry {
	__u64 gen;     /* struct lfp_fib_gen's plus lfp_gate.fib_epoch, read before the lookup */
	__u32 ifindex; /* egress */
	__u32 nh0;     /* the next hop's first word, all of it for IPv4 (bpf_fib_lookup() writes
			* the next hop over the destination) */
	__u16 mtu;     /* the largest IP length the lookup let through (0xffff: any) */
	__u8 smac[6];
	__u8 dmac[6];
	__u8 flags;    /* LFP_FIB_* */
	__u8 neigh_ok; /* the next hop was not in the STALE set at fill time (lib/neigh.h) */
	/* The second line. */
	__u32 nh6[3];  /* IPv6: the next hop's other three words */
	__u32 pad;
	/* Kept by the first packet encapsulated after the fill (lib/vxlan.h, vxlan_remote()). */
	struct lfp_vx_remote vx;
	__u32 pad2[4];
};

/* One place of the FIB cache (lib/fibcache.h): the key its answer is for, and the answer. 128
 * bytes, two cache lines. */
struct lfp_fib_way {
	struct lfp_fib_key key;
	__u32 pad;
	struct lfp_fib_entry e;
};

/* A set of the FIB cache: the places a key may be kept in (lib/fibcache.h). 256 bytes: in the
 * cache's page-aligned array each place starts a cache line. */
struct lfp_fib_set {
	struct lfp_fib_way way[2];
};

#endif
