/* NAT: the translation an established connection's conntrack entry says Linux applies to its
 * packets (nf_nat_manip_pkt() at prerouting and postrouting), written into the packet with the
 * checksum updates nf_nat_ipv4_manip_pkt() / nf_nat_ipv6_manip_pkt() and the TCP/UDP manip
 * functions make. */
#ifndef LFP_NAT_H
#define LFP_NAT_H

#include "ctx.h"
#include "parse.h"
#include "ct.h"

/* The ports, after the addresses (tcp_manip_pkt(), udp_manip_pkt()): os/odport as the packet
 * had them. */
static __always_inline int nat_rewrite_ports(lfp_ctx *ctx, const struct ct_pkt *c, __u32 l4, __u32 csum_off,
					     __u64 mangled, __be16 osport, __be16 odport)
{
	int err = 0;

	if (osport != c->nat_sport) {
		err |= ctx_l4_csum_replace(ctx, csum_off, osport, c->nat_sport, mangled | 2);
		err |= ctx_store_bytes(ctx, l4, &c->nat_sport, 2, 0);
	}
	if (odport != c->nat_dport) {
		err |= ctx_l4_csum_replace(ctx, csum_off, odport, c->nat_dport, mangled | 2);
		err |= ctx_store_bytes(ctx, l4 + 2, &c->nat_dport, 2, 0);
	}
	return err;
}

/* Whether c's translation moves the packet's destination address: what br_netfilter compares
 * after the IP prerouting hook (br_nf_ipv4_daddr_was_changed(), br_nf_ipv6_daddr_was_changed()),
 * and routes the packet again for. */
static __always_inline int nat_daddr_moved(const struct ct_pkt *c)
{
	if (!c->v6)
		return c->nat_daddr[0] != c->t.ipv4.daddr;
#pragma unroll
	for (int i = 0; i < 4; i++)
		if (c->nat_daddr[i] != c->t.ipv6.daddr[i])
			return 1;
	return 0;
}

/* Whether c's translation moves the packet's destination port. */
static __always_inline int nat_dport_moved(const struct ct_pkt *c)
{
	return c->nat_dport != (c->v6 ? c->t.ipv6.dport : c->t.ipv4.dport);
}

/* Rewrite an IPv4 TCP or UDP packet (headers at ETH_HLEN, no options) to c's translation, one
 * changed field at a time, as the kernel's manip functions do. Every packet pointer is invalid
 * afterwards. Returns 0, or <0 when a write failed (the packet may be half rewritten then: the
 * caller drops it; cannot happen for a linear header). */
static __always_inline int nat_rewrite4(lfp_ctx *ctx, const struct ct_pkt *c)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct iphdr *iph = data + ETH_HLEN;
	__be16 *ports = (void *)(iph + 1);
	__u32 l4 = ETH_HLEN + sizeof(struct iphdr);
	__u32 csum_off = l4 + (c->proto == IPPROTO_TCP ? 16 : 6);
	/* UDP: a zero checksum (none) stays zero, a result of zero becomes 0xffff
	 * (udp_manip_pkt()); for CHECKSUM_PARTIAL only the pseudo-header part changes. */
	__u64 mangled = c->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__be32 osaddr, odaddr;
	__be16 osport, odport;
	int err = 0;

	if ((void *)(ports + 2) > data_end)
		return -1;
	osaddr = iph->saddr;
	odaddr = iph->daddr;
	osport = ports[0];
	odport = ports[1];
	if (osaddr != c->nat_saddr[0]) {
		err |= ctx_l4_csum_replace(ctx, csum_off, osaddr, c->nat_saddr[0], BPF_F_PSEUDO_HDR | mangled | 4);
		err |= ctx_l3_csum_replace(ctx, ETH_HLEN + 10, osaddr, c->nat_saddr[0], 4);
		err |= ctx_store_bytes(ctx, ETH_HLEN + 12, &c->nat_saddr[0], 4, 0);
	}
	if (odaddr != c->nat_daddr[0]) {
		err |= ctx_l4_csum_replace(ctx, csum_off, odaddr, c->nat_daddr[0], BPF_F_PSEUDO_HDR | mangled | 4);
		err |= ctx_l3_csum_replace(ctx, ETH_HLEN + 10, odaddr, c->nat_daddr[0], 4);
		err |= ctx_store_bytes(ctx, ETH_HLEN + 16, &c->nat_daddr[0], 4, 0);
	}
	err |= nat_rewrite_ports(ctx, c, l4, csum_off, mangled, osport, odport);
	return err ? -1 : 0;
}

/* Rewrite an IPv6 TCP or UDP packet (headers at ETH_HLEN, the L4 header right after the fixed
 * header: ct_parse() takes nothing else) to c's translation, as nf_nat_ipv6_manip_pkt() does:
 * no header checksum; the L4 checksum gets the pseudo header's address change
 * (nf_nat_ipv6_csum_update(), inet_proto_csum_replace16(): here one 32-bit word at a time, the
 * same one's complement sum), then the port's. A UDP checksum of 0 stays 0 as in IPv4:
 * udp_manip_pkt() updates it only when set, whatever the family (and Linux forwards such a
 * datagram; only a local UDPv6 socket refuses it). Every packet pointer is invalid afterwards.
 * Returns as nat_rewrite4(). */
static __always_inline int nat_rewrite6(lfp_ctx *ctx, const struct ct_pkt *c)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	__be16 *ports = (void *)(ip6 + 1);
	__u32 l4 = ETH_HLEN + sizeof(struct ipv6hdr);
	__u32 csum_off = l4 + (c->proto == IPPROTO_TCP ? 16 : 6);
	__u64 mangled = c->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__be32 osaddr[4], odaddr[4];
	__be16 osport, odport;
	int err = 0;

	if ((void *)(ports + 2) > data_end)
		return -1;
	__builtin_memcpy(osaddr, &ip6->saddr, 16);
	__builtin_memcpy(odaddr, &ip6->daddr, 16);
	osport = ports[0];
	odport = ports[1];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (osaddr[i] != c->nat_saddr[i]) {
			err |= ctx_l4_csum_replace(ctx, csum_off, osaddr[i], c->nat_saddr[i],
						   BPF_F_PSEUDO_HDR | mangled | 4);
			err |= ctx_store_bytes(ctx, ETH_HLEN + 8 + 4 * i, &c->nat_saddr[i], 4, 0);
		}
		if (odaddr[i] != c->nat_daddr[i]) {
			err |= ctx_l4_csum_replace(ctx, csum_off, odaddr[i], c->nat_daddr[i],
						   BPF_F_PSEUDO_HDR | mangled | 4);
			err |= ctx_store_bytes(ctx, ETH_HLEN + 24 + 4 * i, &c->nat_daddr[i], 4, 0);
		}
	}
	err |= nat_rewrite_ports(ctx, c, l4, csum_off, mangled, osport, odport);
	return err ? -1 : 0;
}

#endif
