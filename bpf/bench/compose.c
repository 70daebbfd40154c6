/* Composition benchmark (the paper's Figure 10): a chain of N simple modules, composed the way
 * linuxfp composes its modules (inline calls in one program, N a frozen .rodata constant the
 * verifier prunes by) and as tail calls (one program per module in a BPF_MAP_TYPE_PROG_ARRAY,
 * each calling the next). Both run the same module step and the same transmit step, built from
 * the data plane's own headers (ctx.h, parse.h, stats.h, tx.h); only the composition differs.
 *
 * A module, per packet: a bounds-checked Ethernet + IPv4 parse, a lookup in its table keyed by
 * the destination (a hash of the destination's /24, or an LPM trie), a per-CPU counter update;
 * the entry it finds may drop the packet (a filter) or choose its egress and MACs (a router).
 * After the last module the packet leaves as the router module sends it: TTL decreased, MACs
 * rewritten, redirected through linuxfp's devmap of ready egress devices (tx_prepare). */
#include "../lib/ctx.h"
#include "../lib/parse.h"
#include "../lib/stats.h"
#include "../lib/tx.h"

char LICENSE[] SEC("license") = "GPL";

/* The longest chain. Tail calls allow 33 programs in a row; 16 is beyond the paper's figure. */
#define COMPOSE_MAX 16

/* What a module's table entry tells the packet. */
#define COMPOSE_NEXT 0 /* go on to the next module */
#define COMPOSE_DROP 1 /* drop it here (counted as LFP_FILTER_DROPPED) */

/* Hash key: the module, and the destination's /24 (network order). One table for all modules,
 * each module's entries under its own number, so every module reads a table of its own. */
struct compose_key {
	__u32 module;
	__u32 net;
};

/* LPM key: the module's number is the first 32 bits of the prefix (entries have prefixlen
 * 32 + the route's length), the destination the rest. */
struct compose_lpm_key {
	__u32 prefixlen;
	__u32 module;
	__u32 addr;
};

struct compose_entry {
	__u32 action;  /* COMPOSE_NEXT or COMPOSE_DROP */
	__u32 ifindex; /* egress chosen by this module (0: keep what earlier modules chose) */
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
};

/* What one module leaves for the next and for the transmit step: the egress and its MACs. In
 * one program it lives on the stack; across tail calls in compose_state_map. */
struct compose_state {
	__u32 ifindex;
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct compose_key);
	__type(value, struct compose_entry);
	__uint(max_entries, COMPOSE_MAX * 256);
} compose_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct compose_lpm_key);
	__type(value, struct compose_entry);
	__uint(max_entries, COMPOSE_MAX * 256);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} compose_lpm SEC(".maps");

/* Packets and bytes each module matched. Per CPU, as linuxfp's own counters (lfp_stats). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_counter);
	__uint(max_entries, COMPOSE_MAX);
} compose_modules SEC(".maps");

/* Tail calls: slot i holds module i's program; the chain of N modules fills slots 1..N-1 (the
 * program of module 0 is the one attached). The last module's tail call finds an empty slot and
 * falls through to the transmit step (slot COMPOSE_MAX is always empty, so even module 15 has a
 * slot to find empty). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, COMPOSE_MAX + 1);
} compose_chain SEC(".maps");

/* The per-packet state a tail-call chain carries (struct compose_state). Per CPU: a chain runs
 * to its end on one CPU with bottom halves off (as linuxfp's lfp_scratch), and module 0
 * overwrites it for every packet. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct compose_state);
	__uint(max_entries, 1);
} compose_state_map SEC(".maps");

/* With cfg_next_from_map: the slot module i tail-calls next, as data (a chain that can be
 * reordered without reloading, as a tail-call data plane built at run time has it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, COMPOSE_MAX);
} compose_next SEC(".maps");

/* Inline: the modules compose_inline runs (1..COMPOSE_MAX). The verifier removes the rest, as it
 * removes the stages an interface does not use from linuxfp's program. */
volatile const __u32 cfg_modules = 1;
/* 1: the modules look up compose_lpm; 0: compose_hash. */
volatile const __u32 cfg_lpm = 0;
/* Tail calls: 0: module i tail-calls slot i + 1, a constant the kernel patches into a direct
 * jump; 1: the slot read from compose_next, an index known only at run time (an indirect jump). */
volatile const __u32 cfg_next_from_map = 0;

/* 1: the program is for BPF_PROG_TEST_RUN, which runs it again and again on one buffer: the TTL is
 * left alone (decreased on every run, the frame would be a TTL-exceeded one after 63 runs). The
 * decrement is the same few instructions after the chain in every composition. */
volatile const __u32 cfg_test_run = 0;

/* One module. Returns a verdict (the packet is decided), or -1: go on. */
static __always_inline int compose_step(lfp_ctx *ctx, struct compose_state *st, __u32 module)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	struct compose_entry *e;
	struct lfp_counter *c;
	__u32 idx = module;

	if ((void *)(eth + 1) > data_end)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return lfp_pass(ctx, LFP_PASS_NOT_IP);
	if ((void *)(iph + 1) > data_end || iph->version != 4 || iph->ihl < 5)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	if (iph->ihl != 5)
		return lfp_pass(ctx, LFP_PASS_IP_OPTIONS);

	if (cfg_lpm) {
		struct compose_lpm_key k;

		k.prefixlen = 64;
		k.module = module;
		k.addr = iph->daddr;
		e = bpf_map_lookup_elem(&compose_lpm, &k);
	} else {
		struct compose_key k;

		k.module = module;
		k.net = iph->daddr & bpf_htonl(0xffffff00);
		e = bpf_map_lookup_elem(&compose_hash, &k);
	}
	if (!e)
		return lfp_pass(ctx, LFP_PASS_FIB_NOT_FWDED);

	c = bpf_map_lookup_elem(&compose_modules, &idx);
	if (c) {
		c->packets++;
		c->bytes += ctx_len(ctx);
	}
	if (e->action == COMPOSE_DROP)
		return lfp_drop(ctx, LFP_FILTER_DROPPED);
	if (e->ifindex) {
		st->ifindex = e->ifindex;
		__builtin_memcpy(st->dmac, e->dmac, ETH_ALEN);
		__builtin_memcpy(st->smac, e->smac, ETH_ALEN);
	}
	return -1;
}

/* After the last module: forward as the router module does, or hand the packet to Linux
 * untouched with the reason. */
static __always_inline int compose_xmit(lfp_ctx *ctx, const struct compose_state *st)
{
	void *data = ctx_data(ctx), *data_end = ctx_data_end(ctx);
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	enum lfp_reason r;

	/* The modules checked it; the verifier needs the bounds again in this program. */
	if ((void *)(iph + 1) > data_end)
		return lfp_pass(ctx, LFP_PASS_MALFORMED);
	if (!st->ifindex)
		return lfp_pass(ctx, LFP_PASS_FIB_NOT_FWDED);
	/* Linux sends ICMP time exceeded. */
	if (iph->ttl <= 1)
		return lfp_pass(ctx, LFP_PASS_TTL);
	r = tx_prepare(ctx, st->ifindex, bpf_ntohs(iph->tot_len), TX_PRIO_KEEP);
	if (r != LFP_FORWARDED)
		return lfp_pass(ctx, r);
	if (!cfg_test_run)
		ipv4_decrease_ttl(iph);
	__builtin_memcpy(eth->h_dest, st->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, st->smac, ETH_ALEN);
	lfp_count(ctx, LFP_FORWARDED);
	return CTX_REDIRECT;
}

/* Inline composition: linuxfp's. Every step is __always_inline; cfg_modules is frozen, so each
 * `i >= cfg_modules` is a known branch and the steps beyond it are dead code the verifier drops. */
SEC("xdp")
int compose_inline(struct xdp_md *ctx)
{
	struct compose_state st;
	int ret;

	st.ifindex = 0;
#pragma unroll
	for (__u32 i = 0; i < COMPOSE_MAX; i++) {
		if (i >= cfg_modules)
			break;
		ret = compose_step(ctx, &st, i);
		if (ret >= 0)
			return ret;
	}
	return compose_xmit(ctx, &st);
}

/* Tail-call composition: module i's program. Everything a module learnt is lost at a tail call
 * but what it put in a map: the state goes through compose_state_map, and the next program
 * parses the headers again (the verifier knows nothing of the packet at a program's start). */
static __always_inline int compose_tail(lfp_ctx *ctx, __u32 module)
{
	struct compose_state *st;
	__u32 key = 0, next = module + 1;
	int ret;

	st = bpf_map_lookup_elem(&compose_state_map, &key);
	if (!st)
		return CTX_PASS; /* cannot happen: an array's slot 0 */
	if (module == 0)
		st->ifindex = 0;
	ret = compose_step(ctx, st, module);
	if (ret >= 0)
		return ret;
	if (cfg_next_from_map) {
		__u32 *n;

		key = module;
		n = bpf_map_lookup_elem(&compose_next, &key);
		if (n)
			bpf_tail_call(ctx, &compose_chain, *n);
	} else {
		bpf_tail_call(ctx, &compose_chain, next);
	}
	/* The slot was empty: this was the last module. */
	return compose_xmit(ctx, st);
}

#define COMPOSE_TAIL(i)                                   \
	SEC("xdp")                                        \
	int compose_tail##i(struct xdp_md *ctx)           \
	{                                                 \
		return compose_tail(ctx, i);              \
	}

COMPOSE_TAIL(0)
COMPOSE_TAIL(1)
COMPOSE_TAIL(2)
COMPOSE_TAIL(3)
COMPOSE_TAIL(4)
COMPOSE_TAIL(5)
COMPOSE_TAIL(6)
COMPOSE_TAIL(7)
COMPOSE_TAIL(8)
COMPOSE_TAIL(9)
COMPOSE_TAIL(10)
COMPOSE_TAIL(11)
COMPOSE_TAIL(12)
COMPOSE_TAIL(13)
COMPOSE_TAIL(14)
COMPOSE_TAIL(15)
