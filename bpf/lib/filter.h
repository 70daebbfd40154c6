/* Filter module: the netfilter ruleset forwarded packets traverse (iptables-nft and native nft
 * chains on prerouting, forward and postrouting), classified exactly or handed to Linux.
 *
 * internal/filter/compile flattens the ruleset of each family into first-match rules (each a
 * conjunction of up to LFP_FW_MAX_TESTS primitive tests and an action: drop, Linux, or skip to a
 * later rule) and selects, through a longest-prefix match on one address, the ordered list of
 * rules that may match (a leaf). classify.go in that package is this code in Go, step for step;
 * its tests compare it with the reference evaluator on random rulesets. Rules and leaves live in
 * two banks: the controller writes the inactive one, then flips lfp_config.fw_bank, so a packet
 * never sees half a ruleset. ipset contents are data in lfp_fw_sets, updated in place.
 *
 * The classification runs after the routing decision (the output interface is known), on whole
 * packets (fragments, IPv4 options, IPv6 extension headers were handed to Linux before). Linux
 * runs prerouting before routing; running it after changes nothing for a packet the fast path
 * forwards or drops: every routing outcome other than "forward out of this device" goes to Linux,
 * which then applies prerouting itself. */
#ifndef LFP_FILTER_H
#define LFP_FILTER_H

#include "ctx.h"
#include "parse.h"
#include "stats.h"
#include "ct.h"
#include "local.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fw_rule);
	__uint(max_entries, 2 * LFP_FW_MAX_RULES);
} lfp_fw_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fw_leaf);
	__uint(max_entries, 2 * LFP_FW_MAX_RULES);
} lfp_fw_leaves SEC(".maps");

/* (bank, family, cut address prefix) -> leaf index. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lfp_fw_lpm_key);
	__type(value, __u32);
	__uint(max_entries, 2 * LFP_FW_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lfp_fw_lpm SEC(".maps");

/* (bank, family, cut address) -> leaf index, for the cut's full-length prefixes (see
 * lfp_fw_host_key); consulted before lfp_fw_lpm. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_fw_host_key);
	__type(value, __u32);
	__uint(max_entries, 2 * LFP_FW_MAX_RULES);
} lfp_fw_hosts SEC(".maps");

/* A bit array in front of lfp_fw_hosts: the bit of each entry's bucket (fw_host_bucket(), the
 * family and address of either bank) is set, so a cut address whose bit is clear has no entry
 * there and the hash lookup is skipped. On the AMD VM a map lookup call costs ~10 ns (its returns
 * are mispredicted under the safe-RET mitigation), an inlined array access ~1, and most packets
 * miss. The controller sets a bit before its entry goes in and clears it only once no entry of
 * the bucket is left, so an entry never finds its bit clear. 2^LFP_FW_FILTER_SHIFT bits (32 KiB):
 * 10,000 entries set about one bit in 26. */
#define LFP_FW_FILTER_SHIFT 18
#define LFP_FW_FILTER_WORDS ((1 << LFP_FW_FILTER_SHIFT) / 64)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LFP_FW_FILTER_WORDS);
} lfp_fw_host_filter SEC(".maps");

/* The same for lfp_fw_sets' full-length entries (fw_set_bucket(): set, protocol, port and
 * address), consulted for a set that holds no other (LFP_FW_SET_HOSTS): there the only entry
 * that can match a key is the key itself, whose bit is set. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LFP_FW_FILTER_WORDS);
} lfp_fw_set_filter SEC(".maps");

/* The same in front of lfp_fw_lpm for the cut's prefixes shorter than an address other than /0:
 * by family and block of addresses (fw_short_bucket()), the bit of every block a prefix of
 * either bank overlaps is set, so an address whose bit is clear is in no such prefix, and /0's
 * leaf is its leaf without a walk down the trie (the usual case for kube-proxy's nftables
 * ruleset: its service CIDR beside /0, and traffic to pods). Set and cleared as
 * lfp_fw_host_filter is.
 * - IPv4: the block is the address's first 16 bits, a bit each (a /12 sets 16 bits, a /17 one).
 * - IPv6: the block is the /64, hashed into 2^16 bits (a /112 service CIDR sets one, a /56
 *   cluster CIDR 256). The first 16 bits would not tell a service from a pod: a network's
 *   addresses share them. A prefix shorter than LFP_FW_SHORT_MIN6 covers too many /64s to set:
 *   where the cut has one, IPv6 takes no leaf without the trie (no LFP_FW_DEFAULT_LEAF6). */
#define LFP_FW_SHORT_WORDS (2 * 65536 / 64)
#define LFP_FW_SHORT_MIN6 54

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LFP_FW_SHORT_WORDS);
} lfp_fw_short_filter SEC(".maps");

/* One step of the buckets' hash (multiplicative: the top bits depend on every bit fed in). The
 * controller computes the same (dataplane.fwMix). */
static __always_inline __u32 fw_mix(__u32 h, __u32 w)
{
	return (h ^ w) * 0x9e3779b1u;
}

/* The bucket of a cut address of family v6 in lfp_fw_short_filter (dataplane.fwShortBucket). */
static __always_inline __u32 fw_short_bucket(const __u32 *a, __u32 v6)
{
	if (v6)
		return 1 << 16 | fw_mix(fw_mix(6, a[0]), a[1]) >> 16;
	return bpf_ntohl(a[0]) >> 16;
}

static __always_inline __u32 fw_mix_addr(__u32 h, const __u32 *a, __u32 v6)
{
	h = fw_mix(h, a[0]);
	if (v6) {
		h = fw_mix(h, a[1]);
		h = fw_mix(h, a[2]);
		h = fw_mix(h, a[3]);
	}
	return h;
}

/* The bucket of a cut address of family v6 in lfp_fw_hosts (any bank). */
static __always_inline __u32 fw_host_bucket(const __u32 *a, __u32 v6)
{
	return fw_mix_addr(v6 ? 6 : 4, a, v6) >> (32 - LFP_FW_FILTER_SHIFT);
}

/* The bucket of a full-length key of lfp_fw_sets (family v6). */
static __always_inline __u32 fw_set_bucket(const struct lfp_fw_set_key *k, __u32 v6)
{
	__u32 h = fw_mix(k->set, ((__u32)k->proto << 16) | k->port);

	return fw_mix_addr(h, k->addr, v6) >> (32 - LFP_FW_FILTER_SHIFT);
}

/* 0 when no entry of the filter's map is in bucket b; 1 when one may be. key: where the array
 * lookup's key is written. */
static __always_inline int fw_filter_maybe(void *filter, __u32 b, __u32 *key)
{
	const __u64 *bits;

	*key = b / 64;
	bits = bpf_map_lookup_elem(filter, key);
	return !bits || (*bits >> (b % 64)) & 1;
}

/* Every ipset the rules use: (kernel set index, proto, port, address prefix) -> 1 member,
 * 0 nomatch. The most specific entry decides, as in the kernel's hash:net types. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lfp_fw_set_key);
	__type(value, __u8);
	__uint(max_entries, 1 << 24); /* entries are allocated as they are added */
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lfp_fw_sets SEC(".maps");

/* Interface -> the rules' interface-pattern bits its name matches. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lfp_fw_if);
	__uint(max_entries, 4096);
} lfp_fw_ifs SEC(".maps");

/* Per flat rule (bank-relative index): packets and bytes it matched in the fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_counter);
	__uint(max_entries, 2 * LFP_FW_MAX_RULES);
} lfp_fw_stats SEC(".maps");

/* What the classifier knows of the packet. Addresses in network byte order, IPv4 in [0]. */
struct fw_pkt {
	__u32 src[4];
	__u32 dst[4];
	__u64 ibits, obits;
	__u16 sport, dport;
	__u8 proto, has_ports, itype, icode;
	__u32 v6;
	__u32 len;
	__u32 ctstate; /* the conntrack state bit (LFP_CT_STATE_*), 0 when conntrack did not run */
	__u32 src_not_local; /* the router handed local and martian sources to Linux already */
	/* Keys of the classifier's map lookups: here, in the per-CPU scratch the packet's fields
	 * live in, rather than on the stack, where the bridge path's tc program has no room left. */
	__u32 key;
	struct lfp_fw_set_key set_key;
	struct lfp_fw_lpm_key lpm_key;
};

struct fw_scan {
	struct fw_pkt *p;
	const struct lfp_fw_leaf *leaf;
	__u32 base;  /* the active bank's first rule (lfp_config.fw_base) */
	__u32 next;  /* rules below this index are skipped */
	__u32 skips;
	__u32 verdict;
};

static __always_inline int fw_addr_in(const __u32 *a, const __u32 *addr, const __u32 *mask, __u32 v6)
{
	if ((a[0] & mask[0]) != addr[0])
		return 0;
	if (!v6)
		return 1;
	return (a[1] & mask[1]) == addr[1] && (a[2] & mask[2]) == addr[2] && (a[3] & mask[3]) == addr[3];
}

/* Set test t's key for p, in p->set_key; 0 when the test cannot match p. */
static __always_inline int fw_set_key(const struct lfp_fw_test *t, struct fw_pkt *p)
{
	struct lfp_fw_set_key *k = &p->set_key;
	const __u32 *a = (t->b & LFP_FW_SET_ADDR_SRC) ? p->src : p->dst;

	k->prefixlen = 64 + (p->v6 ? 128 : 32);
	k->set = t->a;
	k->proto = 0;
	k->pad = 0;
	k->port = 0;
	if (t->b & LFP_FW_SET_HAS_PORT) {
		/* ip_set_get_ip4_port(): IPv4 protocol 0 does not match. */
		if (!p->v6 && p->proto == 0)
			return 0;
		k->proto = p->proto;
		/* ip_set_get_port() reads the ports of TCP, UDP, SCTP and UDPlite only. */
		if (p->has_ports && p->proto != IPPROTO_DCCP)
			k->port = (t->b & LFP_FW_SET_PORT_SRC) ? p->sport : p->dport;
		else if (p->proto == IPPROTO_ICMP || p->proto == NEXTHDR_ICMPV6)
			k->port = ((__u16)p->itype << 8) | p->icode;
	}
	k->addr[0] = a[0];
	k->addr[1] = a[1];
	k->addr[2] = a[2];
	k->addr[3] = a[3];
	if (t->b & LFP_FW_SET_HASH_IP) {
		/* hash:ip: looked up masked to the set's netmask (t->mask); zero never matches. */
		k->addr[0] &= t->mask[0];
		k->addr[1] &= t->mask[1];
		k->addr[2] &= t->mask[2];
		k->addr[3] &= t->mask[3];
		if (!(k->addr[0] | k->addr[1] | k->addr[2] | k->addr[3]))
			return 0;
	}
	return 1;
}

/* Whether the key fw_set_key() wrote may be in a set of full-length entries (its bit is set). */
static __always_inline int fw_set_hosts_maybe(struct fw_pkt *p)
{
	return fw_filter_maybe(&lfp_fw_set_filter, fw_set_bucket(&p->set_key, p->v6), &p->key);
}

static __always_inline int fw_set(const struct lfp_fw_test *t, struct fw_pkt *p)
{
	__u8 *v;

	if (!fw_set_key(t, p))
		return 0;
	if ((t->b & LFP_FW_SET_HOSTS) && !fw_set_hosts_maybe(p))
		return 0;
	v = bpf_map_lookup_elem(&lfp_fw_sets, &p->set_key);
	return v && *v;
}

/* 1 when no rule of leaf l can match p by the leaf's guard (lfp_fw_leaf.guard): the packet is
 * accepted without going through the rules (a callback and a test call per rule). */
static __always_inline int fw_leaf_guarded(const struct lfp_config *cfg, const struct lfp_fw_leaf *l, struct fw_pkt *p)
{
	const struct lfp_fw_rule *r;
	const struct lfp_fw_test *t;

	if (!l->guard)
		return 0;
	p->key = cfg->fw_base + l->rules[0];
	r = bpf_map_lookup_elem(&lfp_fw_rules, &p->key);
	if (!r)
		return 0;
	t = &r->t[(l->guard - 1) & (LFP_FW_MAX_TESTS - 1)];
	if (t->kind != LFP_FW_TEST_SET || t->inv || !(t->b & LFP_FW_SET_HOSTS))
		return 0;
	return !fw_set_key(t, p) || !fw_set_hosts_maybe(p);
}

/* fw_leaf_guarded() for filter_classify: out of line there, where inlined its registers spill past
 * the stack the bridge path's tc program has left. */
__attribute__((noinline)) int fw_leaf_guarded_call(const struct lfp_config *cfg, const struct lfp_fw_leaf *l, struct fw_pkt *p)
{
	if (!cfg || !l || !p)
		return 0;
	return fw_leaf_guarded(cfg, l, p);
}

/* Global (not inlined) functions are verified once, not at every call: a rule's eight tests,
 * each of nine kinds, would otherwise multiply the verifier's work (program load went from
 * 15 ms to 450 ms). */
__attribute__((noinline)) int fw_test(const struct lfp_fw_test *t, struct fw_pkt *p)
{
	if (!t || !p)
		return 0;
	switch (t->kind) {
	case LFP_FW_TEST_SRC:
		return fw_addr_in(p->src, t->addr, t->mask, p->v6);
	case LFP_FW_TEST_DST:
		return fw_addr_in(p->dst, t->addr, t->mask, p->v6);
	case LFP_FW_TEST_PROTO:
		return p->proto == t->a;
	case LFP_FW_TEST_SPORT:
		return p->has_ports && t->a <= p->sport && p->sport <= t->b;
	case LFP_FW_TEST_DPORT:
		return p->has_ports && t->a <= p->dport && p->dport <= t->b;
	case LFP_FW_TEST_ICMP:
		if (p->proto != (p->v6 ? NEXTHDR_ICMPV6 : IPPROTO_ICMP))
			return 0;
		return (t->a > 255 || p->itype == t->a) && p->icode >= (t->b >> 8) && p->icode <= (t->b & 0xff);
	case LFP_FW_TEST_IIF:
		return (p->ibits >> (t->a & 63)) & 1;
	case LFP_FW_TEST_OIF:
		return (p->obits >> (t->a & 63)) & 1;
	case LFP_FW_TEST_SET:
		return fw_set(t, p);
	case LFP_FW_TEST_CTSTATE:
		return (p->ctstate & t->a) != 0;
	}
	return 0;
}

/* Whether the packet's source (dst 0) or destination may be local (local.h). A global function:
 * the LPM key's stack frame is not added to filter_classify's, whose deepest call chain (through
 * bpf_loop and fw_test) the bridge path's tc program has no room left on. */
__attribute__((noinline)) int fw_local(const struct lfp_config *cfg, const struct fw_pkt *p, __u32 dst)
{
	if (!cfg || !p)
		return 1;
	return local_maybe(cfg, dst ? p->dst : p->src, p->v6);
}

static long fw_scan_one(__u64 i, void *arg)
{
	struct fw_scan *s = arg;
	const struct lfp_fw_rule *r;
	__u32 ri, key;

	if (i >= s->leaf->n || i >= LFP_FW_MAX_LEAF)
		return 1;
	ri = s->leaf->rules[i & (LFP_FW_MAX_LEAF - 1)];
	if (ri < s->next)
		return 0;
	key = s->base + ri;
	r = bpf_map_lookup_elem(&lfp_fw_rules, &key);
	if (!r) {
		s->verdict = LFP_FW_LINUX;
		return 1;
	}
#pragma unroll
	for (int j = 0; j < LFP_FW_MAX_TESTS; j++) {
		if (j >= r->ntests)
			break;
		if (fw_test(&r->t[j], s->p) == r->t[j].inv)
			return 0;
	}
	{
		struct lfp_counter *c = bpf_map_lookup_elem(&lfp_fw_stats, &key);

		if (c) {
			c->packets++;
			c->bytes += s->p->len;
		}
	}
	switch (r->action) {
	case LFP_FW_ACT_DROP:
		s->verdict = LFP_FW_DROP | (r->pre_ct ? LFP_FW_PRE_CT : 0);
		return 1;
	case LFP_FW_ACT_SKIP:
		if (++s->skips <= LFP_FW_MAX_SKIPS) {
			s->next = r->skip_to;
			return 0;
		}
		/* fallthrough: too many skips */
	default:
		s->verdict = LFP_FW_LINUX;
		return 1;
	}
}

/* The transport fields the rules test, from the L4 header at l4 (l4len bytes of it belong to the
 * packet). A protocol with ports or ICMP whose header is not all there, or an IPv6 extension
 * header (the rules see the protocol after them), goes to Linux. */
static __always_inline enum lfp_reason filter_l4(struct fw_pkt *p, __u8 proto, void *l4, void *data_end,
						 __u32 l4len, __u32 tot)
{
	p->proto = proto;
	p->len = tot;
	switch (proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
	case IPPROTO_DCCP:
	case IPPROTO_UDPLITE: {
		__be16 *ports = l4;

		if ((void *)(ports + 2) > data_end || l4len < 4)
			return LFP_PASS_FILTER_HEADERS;
		p->has_ports = 1;
		p->sport = bpf_ntohs(ports[0]);
		p->dport = bpf_ntohs(ports[1]);
		break;
	}
	case IPPROTO_ICMP:
	case NEXTHDR_ICMPV6: {
		__u8 *tc = l4;

		if ((void *)(tc + 2) > data_end || l4len < 2)
			return LFP_PASS_FILTER_HEADERS;
		p->itype = tc[0];
		p->icode = tc[1];
		break;
	}
	}
	if (p->v6) {
		switch (proto) {
		case 0: case 43: case 44: case 51: case 60: case 135: case 139: case 140:
			return LFP_PASS_FILTER_HEADERS;
		}
	}
	return LFP_FORWARDED;
}

/* Classify a forwarded packet: LFP_FW_ACCEPT, LFP_FW_DROP (with LFP_FW_PRE_CT when a rule before
 * conntrack dropped it) or LFP_FW_LINUX. in_ifindex and
 * out_ifindex are the interfaces the rules see (for a bridged packet, the bridge both times);
 * rx_mark_unsafe: the device the frame arrived on may hand it over with a mark
 * (LFP_IF_MARK_UNSAFE). */
__attribute__((noinline)) __u32 filter_classify(const struct lfp_config *cfg, struct fw_pkt *p,
						 __u32 in_ifindex, __u32 out_ifindex, __u32 rx_mark_unsafe)
{
	if (!cfg || !p)
		return LFP_FW_LINUX;
	__u32 bank = cfg->fw_bank & 1, fam = p->v6 ? 1 : 0, key;
	struct lfp_fw_lpm_key *lk = &p->lpm_key;
	struct lfp_fw_if *ifv;
	struct fw_scan s = {};
	__u32 *leaf_idx;

	/* Mark matches were folded assuming mark 0: not where a same-namespace peer may set one. */
	if ((cfg->fw_flags & (fam ? LFP_FW_HAS_MARK6 : LFP_FW_HAS_MARK4)) && rx_mark_unsafe)
		return LFP_FW_LINUX;
	/* Rules test a conntrack state the fast path did not look up. */
	if ((cfg->fw_flags & (fam ? LFP_FW_HAS_CTSTATE6 : LFP_FW_HAS_CTSTATE4)) && !p->ctstate)
		return LFP_FW_LINUX;
	/* `fib saddr|daddr type local` matches were folded as "not local" (the compiler's
	 * Program.FibLocalSrc/Dst): an address that may be local is Linux's. */
	if ((cfg->fw_flags & (fam ? LFP_FW_FIB_SRC6 : LFP_FW_FIB_SRC4)) && !p->src_not_local && fw_local(cfg, p, 0))
		return LFP_FW_LINUX;
	if ((cfg->fw_flags & (fam ? LFP_FW_FIB_DST6 : LFP_FW_FIB_DST4)) && fw_local(cfg, p, 1))
		return LFP_FW_LINUX;
	/* No rule can match the packet's conntrack state: accepted, with no leaf looked up. Only
	 * here, after the checks above: a mark, or an address that may be local, could make a rule
	 * the compiler folded away match. */
	if (p->ctstate & cfg->fw_ct_none[fam & 1])
		return LFP_FW_ACCEPT;
	if (cfg->fw_flags & (fam ? LFP_FW_HAS_IF6 : LFP_FW_HAS_IF4)) {
		ifv = bpf_map_lookup_elem(&lfp_fw_ifs, &in_ifindex);
		if (!ifv)
			return LFP_FW_LINUX;
		p->ibits = ifv->bits[fam];
		ifv = bpf_map_lookup_elem(&lfp_fw_ifs, &out_ifindex);
		if (!ifv)
			return LFP_FW_LINUX;
		p->obits = ifv->bits[fam];
	}

	lk->prefixlen = 32 + (p->v6 ? 128 : 32);
	lk->sel = (bank << 8) | fam;
	{
		const __u32 *a = (cfg->fw_flags & (fam ? LFP_FW_CUT_SRC6 : LFP_FW_CUT_SRC4)) ? p->src : p->dst;

		lk->addr[0] = a[0];
		lk->addr[1] = a[1];
		lk->addr[2] = a[2];
		lk->addr[3] = a[3];
	}
	/* struct lfp_fw_host_key is lfp_fw_lpm_key without the prefix length. */
	leaf_idx = NULL;
	if (fw_filter_maybe(&lfp_fw_host_filter, fw_host_bucket(lk->addr, fam), &p->key))
		leaf_idx = bpf_map_lookup_elem(&lfp_fw_hosts, &lk->sel);
	if (leaf_idx)
		key = *leaf_idx;
	else if ((cfg->fw_flags & (LFP_FW_DEFAULT_LEAF4 << fam)) &&
		 !((cfg->fw_flags & (LFP_FW_SHORT4 << fam)) &&
		   fw_filter_maybe(&lfp_fw_short_filter, fw_short_bucket(lk->addr, fam), &p->key)))
		key = cfg->fw_default_leaf[fam];
	else if ((leaf_idx = bpf_map_lookup_elem(&lfp_fw_lpm, lk)))
		key = *leaf_idx;
	else
		return LFP_FW_LINUX;
	key += cfg->fw_base;
	s.leaf = bpf_map_lookup_elem(&lfp_fw_leaves, &key);
	if (!s.leaf || s.leaf->overflow)
		return LFP_FW_LINUX;
	/* No rule may match (there is none, or the leaf's guard says so): accepted, without the
	 * loop and a call per rule and test. */
	if (!s.leaf->n || (s.leaf->guard && fw_leaf_guarded_call(cfg, s.leaf, p)))
		return LFP_FW_ACCEPT;
	s.p = p;
	s.base = cfg->fw_base;
	s.verdict = LFP_FW_ACCEPT;
	bpf_loop(LFP_FW_MAX_LEAF, fw_scan_one, &s, 0);
	return s.verdict;
}

/* The flags under which filter_classify does more before the leaf than filter_quick_accept can
 * (a call to fw_local(), the interfaces' bits), and LFP_FW_DEFAULT_LEAF4 that it needs, IPv4's:
 * IPv6's are the next bits. */
#define LFP_FW_QUICK_MASK4 (LFP_FW_FIB_SRC4 | LFP_FW_FIB_DST4 | LFP_FW_HAS_IF4 | LFP_FW_DEFAULT_LEAF4)

/* 1 when filter_classify would accept the packet because its cut address is no host entry and
 * in no other short prefix, and no rule of the /0 leaf can match (it has none, or its guard
 * says so); 0 when it must be asked. Inlined: filter_classify is a global function (verified
 * once, not per caller), and on the AMD VM its call costs ~10 ns (the return is mispredicted
 * under the safe-RET mitigation), as much as the rest of the filter in this case: the usual one
 * for a blacklist of hosts, and traffic to everything else. */
static __always_inline int filter_quick_accept(const struct lfp_config *cfg, struct fw_pkt *p, __u32 mark_unsafe)
{
	__u32 fam = p->v6 ? 1 : 0;
	/* filter_classify's first check: a device that may hand over a mark where mark matches
	 * were folded. */
	int marked = mark_unsafe && (cfg->fw_flags & (LFP_FW_HAS_MARK4 << fam));
	const struct lfp_fw_leaf *l;
	const __u32 *a;

	/* filter_classify's accept of a conntrack state no rule can match, where none of its
	 * checks before it applies: no fib type local folded, no mark on this device. */
	if ((p->ctstate & cfg->fw_ct_none[fam]) && !(cfg->fw_flags & ((LFP_FW_FIB_SRC4 | LFP_FW_FIB_DST4) << fam)) &&
	    !marked)
		return 1;

	if ((cfg->fw_flags & (LFP_FW_QUICK_MASK4 << fam)) != (LFP_FW_DEFAULT_LEAF4 << fam))
		return 0;
	/* Its next: no conntrack state where rules test it. */
	if (marked || ((cfg->fw_flags & (LFP_FW_HAS_CTSTATE4 << fam)) && !p->ctstate))
		return 0;
	a = (cfg->fw_flags & (LFP_FW_CUT_SRC4 << fam)) ? p->src : p->dst;
	if (fw_filter_maybe(&lfp_fw_host_filter, fw_host_bucket(a, fam), &p->key))
		return 0;
	if ((cfg->fw_flags & (LFP_FW_SHORT4 << fam)) && fw_filter_maybe(&lfp_fw_short_filter, fw_short_bucket(a, fam), &p->key))
		return 0;
	p->key = cfg->fw_base + cfg->fw_default_leaf[fam];
	l = bpf_map_lookup_elem(&lfp_fw_leaves, &p->key);
	return l && !l->overflow && (!l->n || fw_leaf_guarded(cfg, l, p));
}

/* The forward and postrouting hooks of a packet the fast path would send (rx: the data of the
 * device it arrived on): the filter's verdict, then conntrack's deferred refresh (ct_refresh) as
 * that verdict says. LFP_FORWARDED: accepted;
 * LFP_FILTER_DROPPED: dropped, as Linux would; LFP_PASS_FILTER: Linux must evaluate it. */
static __always_inline enum lfp_reason filter_forward(lfp_ctx *ctx, const struct lfp_config *cfg, struct fw_pkt *p,
						      struct ct_pkt *c, const struct lfp_if *rx, __u32 in_ifindex,
						      __u32 out_ifindex)
{
	__u32 mark_unsafe = rx->flags & LFP_IF_MARK_UNSAFE, v = LFP_FW_ACCEPT;

	if (!filter_quick_accept(cfg, p, mark_unsafe))
		v = filter_classify(cfg, p, in_ifindex, out_ifindex, mark_unsafe);

	ct_refresh(ctx, c, v);
	v &= 3;
	if (v == LFP_FW_DROP)
		return LFP_FILTER_DROPPED;
	if (v != LFP_FW_ACCEPT)
		return LFP_PASS_FILTER;
	return LFP_FORWARDED;
}

#endif
