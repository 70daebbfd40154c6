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

static __always_inline int local_route4(const struct lfp_config *cfg, __be32 a)
{
	if (bpf_map_lookup_elem(&lfp_local4, &a))
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
	if (bpf_map_lookup_elem(&lfp_local6, a))
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
