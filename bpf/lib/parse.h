/* Header definitions and small helpers shared by the modules: Ethernet, IPv4, IPv6, checksums. */
#ifndef LFP_PARSE_H
#define LFP_PARSE_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#define IP_MF     0x2000
#define IP_OFFSET 0x1FFF

#define NEXTHDR_HOP    0
#define NEXTHDR_ICMPV6 58

/* Neighbour states (include/uapi/linux/neighbour.h), for the neighbour mirror. */
#define LFP_NUD_STALE 0x04

/* csum_add(): 32-bit one's complement addition (end-around carry). */
static __always_inline __u32 csum_add(__u32 a, __u32 b)
{
	__u32 r = a + b;

	return r + (r < b);
}

static __always_inline __u16 csum_fold(__u32 csum)
{
	csum = (csum & 0xffff) + (csum >> 16);
	csum = (csum & 0xffff) + (csum >> 16);
	return (__u16)~csum;
}

/* RFC 1624 incremental update of a checksum field for a changed 32/16-bit word (a 16-bit one
 * zero-extended, as the kernel's inet_proto_csum_replace2() does). */
static __always_inline __u16 csum_replace(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~from + (__u16)~(from >> 16);
	sum += (__u16)to + (__u16)(to >> 16);
	return csum_fold(sum);
}

/* A UDP checksum that computes to 0 is sent as this (0 means "no checksum"). */
#ifndef CSUM_MANGLED_0
#define CSUM_MANGLED_0 0xffff
#endif

/* The checksum of a 20-byte IPv4 header whose check field is 0 (ip_send_check()). */
static __always_inline __u16 ipv4_csum(const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*iph) / 2); i++)
		sum += w[i];
	return csum_fold(sum);
}

/* True when the 20-byte IPv4 header's checksum is wrong (ip_fast_csum() != 0 in Linux). Summed as
 * five 32-bit words, as ip_fast_csum() does: a one's complement sum folded to 16 bits is the same
 * whatever the width of the words added (65536 is 1 modulo 65535), and five loads and adds are
 * half of ten. */
static __always_inline int ipv4_csum_bad(const struct iphdr *iph)
{
	const __u32 *w = (const __u32 *)iph;
	__u64 sum = (__u64)w[0] + w[1] + w[2] + w[3] + w[4];

	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return csum_fold((__u32)sum) != 0;
}

/* Linux's ip_decrease_ttl(): the same incremental update, so the bytes on the wire are the ones
 * Linux would write (including how 0x0000/0xffff come out). */
static __always_inline void ipv4_decrease_ttl(struct iphdr *iph)
{
	__u32 check = (__u32)iph->check;

	check += (__u32)bpf_htons(0x0100);
	iph->check = (__u16)(check + (check >= 0xFFFF));
	iph->ttl--;
}

/* proto_ports_offset(): where the flow dissector finds the two 16-bit "ports" that fib rules and
 * multipath hashing see, or -1. */
static __always_inline int l4_ports_offset(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_DCCP:
	case IPPROTO_ESP:
	case IPPROTO_SCTP:
	case IPPROTO_UDPLITE:
		return 0;
	case IPPROTO_AH:
		return 4;
	}
	return -1;
}

/* Whether a MAC in packet data (a) equals one at an even address of a map value (b): one 32-bit
 * and one 16-bit compare instead of six byte compares (struct ethhdr is packed, so its fields are
 * read a byte at a time otherwise). Packet data may be read unaligned here: the programs are not
 * loaded with strict alignment. */
static __always_inline int mac_equal_w(const __u8 *a, const __u8 *b)
{
	return ((*(const __u32 *)a ^ *(const __u32 *)b) | (*(const __u16 *)(a + 4) ^ *(const __u16 *)(b + 4))) == 0;
}

/* Copies a MAC from an even address (b) into packet data (a) in three 16-bit words, where the
 * packed struct ethhdr would have six byte stores and the shifts to feed them. */
static __always_inline void mac_copy_w(__u8 *a, const __u8 *b)
{
	((__u16 *)a)[0] = ((const __u16 *)b)[0];
	((__u16 *)a)[1] = ((const __u16 *)b)[1];
	((__u16 *)a)[2] = ((const __u16 *)b)[2];
}

/* The EtherType, in network byte order, in one 16-bit load (see mac_equal_w()). */
static __always_inline __be16 eth_proto(const struct ethhdr *eth)
{
	return *(const __be16 *)((const __u8 *)eth + 12);
}

#endif
