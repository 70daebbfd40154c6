/* The host's local, broadcast, anycast and multicast routes of every table (their destinations),
 * kept by the controller (internal/dataplane/router.go): the router hands Linux packets from
 * these sources (martian for Linux), and the filter asks whether an address may be local for
 * `fib saddr|daddr type local` (filter.h). Addresses of the classes the router rejects by class
 * anyway (IPv4 0/8, 127/8, 224/3; IPv6 multicast, link-local, ::/127, v4-mapped) are left out. */
#ifndef LFP_LOCAL_H
#define LFP_LOCAL_H

#include "ctx.h"
#include "linuxfp_types.h"

/* Host addresses Linux treats as local or broadcast (sources it rejects as martian). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 16384);
} lfp_local4 SEC(".maps");

struct lfp_in6 {
	__u32 a[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_in6);
	__type(value, __u8);
	__uint(max_entries, 16384);
} lfp_local6 SEC(".maps");

/* Non-host local routes (ip route add local 198.18.0.0/16 dev lo): consulted only when present. */
struct lfp_lpm4_key {
	__u32 prefixlen;
	__u32 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lfp_lpm4_key);
	__type(value, __u8);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lfp_local_pfx4 SEC(".maps");

struct lfp_lpm6_key {
	__u32 prefixlen;
	struct lfp_in6 addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lfp_lpm6_key);
	__type(value, __u8);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lfp_local_pfx6 SEC(".maps");

/* A bit per bucket of the addresses in lfp_local4 and lfp_local6 (local_bucket()): an address
 * whose bit is clear is none of them, and the hash lookup is skipped. Nearly every forwarded
 * packet's source is not local; the hash lookup cost ~10 ns per packet (three calls whose
 * returns are mispredicted under the safe-RET mitigation of the AMD VM), this array's inlined
 * lookup ~1. The controller sets a bit before it adds an address and clears it only after the
 * last address of its bucket is gone, so a local address never finds its bit clear. */
#define LFP_LOCAL_FILTER_WORDS 1024

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LFP_LOCAL_FILTER_WORDS);
} lfp_local_filter SEC(".maps");

/* The bucket of an address of `words` 32-bit words (network byte order, as the maps keep it).
 * The controller computes the same (dataplane.localBucket). */
static __always_inline __u32 local_bucket(const __u32 *a, int words)
{
	__u32 h = a[0] * 0x9e3779b1u;

	if (words == 4) {
		h = (h ^ a[1]) * 0x85ebca6bu;
		h = (h ^ a[2]) * 0xc2b2ae35u;
		h = (h ^ a[3]) * 0x9e3779b1u;
	}
	return h >> 16;
}

/* 0 when the address is surely not in lfp_local4/lfp_local6; 1 when it may be. */
static __always_inline int local_bucket_set(const __u32 *a, int words)
{
	__u32 b = local_bucket(a, words), w = b / 64;
	const __u64 *bits = bpf_map_lookup_elem(&lfp_local_filter, &w);

	return !bits || (*bits >> (b % 64)) & 1;
}

static __always_inline int local_route4(const struct lfp_config *cfg, __be32 a)
{
	if (local_bucket_set(&a, 1) && bpf_map_lookup_elem(&lfp_local4, &a))
		return 1;
	if (cfg->local_prefixes4) {
		struct lfp_lpm4_key k = { .prefixlen = 32, .addr = a };

		if (bpf_map_lookup_elem(&lfp_local_pfx4, &k))
			return 1;
	}
	return 0;
}

static __always_inline int local_route6(const struct lfp_config *cfg, const struct lfp_in6 *a)
{
	if (local_bucket_set(a->a, 4) && bpf_map_lookup_elem(&lfp_local6, a))
		return 1;
	if (cfg->local_prefixes6) {
		struct lfp_lpm6_key k = { .prefixlen = 128 };

		k.addr = *a;
		if (bpf_map_lookup_elem(&lfp_local_pfx6, &k))
			return 1;
	}
	return 0;
}

/* Whether `fib saddr|daddr type local` may hold for a (network byte order; IPv4 in a[0]): a route
 * above covers it, or it is of a class they leave out (which the FIB may well call local:
 * 127.0.0.0/8 is). 0: it is not local. */
static __always_inline int local_maybe(const struct lfp_config *cfg, const __u32 *a, __u32 v6)
{
	if (!v6) {
		__u32 h = bpf_ntohl(a[0]);

		if ((h >> 24) == 0 || (h >> 24) == 127 || h >= 0xE0000000)
			return 1;
		return local_route4(cfg, a[0]);
	}
	/* ff00::/8, fe80::/10 */
	if ((a[0] & bpf_htonl(0xff000000)) == bpf_htonl(0xff000000) ||
	    (a[0] & bpf_htonl(0xffc00000)) == bpf_htonl(0xfe800000))
		return 1;
	/* ::/127 and ::ffff:0:0/96 */
	if (a[0] == 0 && a[1] == 0 &&
	    ((a[2] == 0 && (a[3] == 0 || a[3] == bpf_htonl(1))) || a[2] == bpf_htonl(0x0000ffff)))
		return 1;
	return local_route6(cfg, (const struct lfp_in6 *)a);
}

#endif
