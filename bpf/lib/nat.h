/* NAT: the translation an established connection's conntrack entry says Linux applies to its
 * packets (nf_nat_manip_pkt() at prerouting and postrouting), written into the packet with the
 * checksum updates nf_nat_ipv4_manip_pkt() and the TCP/UDP manip functions make. */
#ifndef LFP_NAT_H
#define LFP_NAT_H

#include "ctx.h"
#include "parse.h"
#include "ct.h"

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
	if (osaddr != c->nat_saddr) {
		err |= ctx_l4_csum_replace(ctx, csum_off, osaddr, c->nat_saddr, BPF_F_PSEUDO_HDR | mangled | 4);
		err |= ctx_l3_csum_replace(ctx, ETH_HLEN + 10, osaddr, c->nat_saddr, 4);
		err |= ctx_store_bytes(ctx, ETH_HLEN + 12, &c->nat_saddr, 4, 0);
	}
	if (odaddr != c->nat_daddr) {
		err |= ctx_l4_csum_replace(ctx, csum_off, odaddr, c->nat_daddr, BPF_F_PSEUDO_HDR | mangled | 4);
		err |= ctx_l3_csum_replace(ctx, ETH_HLEN + 10, odaddr, c->nat_daddr, 4);
		err |= ctx_store_bytes(ctx, ETH_HLEN + 16, &c->nat_daddr, 4, 0);
	}
	if (osport != c->nat_sport) {
		err |= ctx_l4_csum_replace(ctx, csum_off, osport, c->nat_sport, mangled | 2);
		err |= ctx_store_bytes(ctx, l4, &c->nat_sport, 2, 0);
	}
	if (odport != c->nat_dport) {
		err |= ctx_l4_csum_replace(ctx, csum_off, odport, c->nat_dport, mangled | 2);
		err |= ctx_store_bytes(ctx, l4 + 2, &c->nat_dport, 2, 0);
	}
	return err ? -1 : 0;
}

#endif
