/* Benchmark generator: rewrites each live frame from a template and redirects it out of gen. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* Live-frame pages are recycled without being re-initialised, and the DUT rewrites what it
 * forwards (MACs, TTL, checksum) in place: every run starts again from this template. It is the
 * Ethernet + IPv4 + UDP header (42 bytes) with daddr 198.19.0.0 (with cfg_list, 0.0.0.0; with
 * neither cfg_list nor cfg_prefixes, the one destination with its checksum), or with cfg_ipv6 the
 * Ethernet + IPv6 + UDP header (62 bytes) with daddr 2001:2:0:f100:: (with cfg_list, ::). Not const:
 * the lengths change with the frame size, and one program, parked once in the XDP dispatcher,
 * serves every size (see newGenerator in internal/bench). */
__u64 tmpl[8] = {};
/* ~(the template's IPv4 header checksum, or with cfg_ipv6 its UDP checksum, which covers the
 * addresses): adding the varying daddr words to it gives the new sum. */
__u32 tmpl_csum_acc = 0;
/* Routed prefixes on the DUT: destinations cycle through 198.19.0..prefixes-1. 0: every frame
 * goes to the template's destination (a host across a bridge); the verifier drops the rest. */
volatile const __u32 cfg_prefixes = 50;
/* gen's eth0, in the namespace the test run executes in. */
volatile const __u32 cfg_ifindex = 0;
/* 1: destinations cycle through the first dst_count entries of gen_dsts instead (the gateway
 * benchmark: an exact mix of destinations a ruleset drops and ones it lets through). 0: the
 * verifier drops the list code (only the loads of this constant remain, 7 instructions), so the
 * router and bridge benchmarks' generator does what it did before list mode existed. */
volatile const __u32 cfg_list = 0;
/* 1: IPv6 frames, to 2001:2:0:f1<prefix>::<host> (the DUT's routed IPv6 prefixes) or with cfg_list
 * to the entries of gen_dsts6. 0: the verifier drops the IPv6 code. */
volatile const __u32 cfg_ipv6 = 0;
/* Entries of gen_dsts (gen_dsts6) in use (1 to GEN_MAX_DSTS); changed only between runs. */
__u32 dst_count = 1;

#define GEN_MAX_DSTS 65536

#define HDR_LEN   (14 + 20 + 8)
#define CSUM_OFF  (14 + 10)
#define DADDR_OFF (14 + 16)
#define DADDR_LO  (14 + 18) /* the last two bytes of daddr: 198.19.<prefix>.<host> */

#define HDR6_LEN   (14 + 40 + 8)
#define DADDR6_OFF (14 + 24)
#define PREFIX6    (DADDR6_OFF + 6)  /* 2001:2:0:f1<prefix>:: */
#define HOST6      (DADDR6_OFF + 14) /* ...::<host> */
#define UCSUM6_OFF (14 + 40 + 6)

struct gen_state {
	__u64 packets; /* frames generated on this CPU, for the offered rate */
	__u32 prefix;  /* 198.19.<prefix>.<host + 1> */
	__u32 host;
	__u32 next;    /* list mode: the entry of gen_dsts to send to next */
};

/* Per CPU, so the generator's cores never share a cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_state);
	__uint(max_entries, 1);
} gen_states SEC(".maps");

/* List mode's destinations: IPv4 addresses in network order. An array: the verifier inlines its
 * lookup (no helper call). max_entries is 1 unless cfg_list (set by the loader). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, GEN_MAX_DSTS);
} gen_dsts SEC(".maps");

/* List mode's IPv6 destinations, cut to fit the 2-byte-aligned daddr with aligned stores (first,
 * then mid at an 8-byte boundary, hi, last), each in network order in memory, with sum: the
 * one's-complement sum of the address's eight 16-bit words as little-endian loads. */
struct gen_dst6 {
	__u64 mid;
	__u32 hi;
	__u16 first;
	__u16 last;
	__u32 sum;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_dst6);
	__uint(max_entries, GEN_MAX_DSTS);
} gen_dsts6 SEC(".maps");

/* The next prefix and host (1 to 254): prefix after prefix, then the next host, without a
 * division per packet. */
static __always_inline void next_prefix_host(struct gen_state *s, __u32 *p, __u32 *h)
{
	*p = s->prefix;
	*h = s->host + 1;
	if (++s->prefix >= cfg_prefixes) {
		s->prefix = 0;
		if (++s->host >= 254)
			s->host = 0;
	}
}

/* Next destination's last two bytes, 198.19.<prefix>.<host>. */
static __always_inline __u16 next_daddr_lo(struct gen_state *s)
{
	__u32 p, h;

	next_prefix_host(s, &p, &h);
	/* Bytes p, h in memory order: the little-endian load of that word. */
	return (__u16)(p | (h << 8));
}

/* Next destination in list mode, in order, then from the start again. */
static __always_inline __u32 next_daddr(struct gen_state *s)
{
	__u32 i = s->next, *d;

	if (i >= dst_count) /* the list got shorter since the last run */
		i = 0;
	s->next = i + 1 < dst_count ? i + 1 : 0;
	d = bpf_map_lookup_elem(&gen_dsts, &i);
	return d ? *d : 0;
}

/* RFC 1624 incremental update: the template's daddr words that vary are 0, so only their new
 * values add in (word: their sum, up to eight 16-bit words). */
static __always_inline __u16 ip_csum(__u32 word)
{
	__u32 sum = tmpl_csum_acc + word;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* The UDP checksum, updated as ip_csum does. IPv6 has no "no checksum" (RFC 8200 8.1: a
 * receiver drops a 0), so a checksum that computes to 0 is sent as 0xffff. */
static __always_inline __u16 udp6_csum(__u32 word)
{
	__u16 c = ip_csum(word);

	return c ? c : 0xffff;
}

/* The IPv6 frame: the template, then the destination (the next prefix and host, or the list's
 * next entry) and the UDP checksum that covers it. */
static __always_inline int gen_ipv6(void *data, void *data_end)
{
	__u32 i, key = 0, p, h;
	struct gen_state *s;
	struct gen_dst6 *d;

	if (data + HDR6_LEN > data_end)
		return XDP_ABORTED;
	s = bpf_map_lookup_elem(&gen_states, &key);
	if (!s)
		return XDP_ABORTED;
	s->packets++;
	((__u64 *)data)[0] = tmpl[0];
	((__u64 *)data)[1] = tmpl[1];
	((__u64 *)data)[2] = tmpl[2];
	((__u64 *)data)[3] = tmpl[3];
	((__u64 *)data)[4] = tmpl[4];
	((__u64 *)data)[5] = tmpl[5];
	((__u64 *)data)[6] = tmpl[6];
	*(__u32 *)(data + 56) = (__u32)tmpl[7];
	*(__u16 *)(data + 60) = (__u16)(tmpl[7] >> 32);
	if (cfg_list) {
		i = s->next;
		if (i >= dst_count)
			i = 0;
		s->next = i + 1 < dst_count ? i + 1 : 0;
		key = i;
		d = bpf_map_lookup_elem(&gen_dsts6, &key);
		if (!d)
			return XDP_ABORTED;
		*(__u16 *)(data + DADDR6_OFF) = d->first;
		*(__u64 *)(data + DADDR6_OFF + 2) = d->mid;
		*(__u32 *)(data + DADDR6_OFF + 10) = d->hi;
		*(__u16 *)(data + DADDR6_OFF + 14) = d->last;
		*(__u16 *)(data + UCSUM6_OFF) = udp6_csum(d->sum);
	} else if (cfg_prefixes) {
		next_prefix_host(s, &p, &h);
		/* Words 0xf1pp (the template's 0xf1 byte kept) and 0x00hh in network order: bytes
		 * 0xf1, p and 0, h (prefixes and hosts below 256); the template has 0 where p and h go,
		 * so the checksum adds them alone. */
		*(__u8 *)(data + PREFIX6 + 1) = (__u8)p;
		*(__u16 *)(data + HOST6) = (__u16)(h << 8);
		*(__u16 *)(data + UCSUM6_OFF) = udp6_csum((p << 8) + (h << 8));
	}
	return bpf_redirect(cfg_ifindex, 0);
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct gen_state *s;
	__u32 key = 0, daddr = 0;
	__u16 lo = 0;

	if (cfg_ipv6)
		return gen_ipv6(data, data_end);
	if (data + HDR_LEN > data_end)
		return XDP_ABORTED;
	s = bpf_map_lookup_elem(&gen_states, &key);
	if (!s)
		return XDP_ABORTED;
	s->packets++;
	if (cfg_list)
		daddr = next_daddr(s);
	else if (cfg_prefixes)
		lo = next_daddr_lo(s);

	/* 8-byte stores: the header starts 8-byte aligned in a live frame, and a byte-wise memcpy
	 * would cost more than the rest of the program. */
	((__u64 *)data)[0] = tmpl[0];
	((__u64 *)data)[1] = tmpl[1];
	((__u64 *)data)[2] = tmpl[2];
	((__u64 *)data)[3] = tmpl[3];
	((__u64 *)data)[4] = tmpl[4];
	*(__u16 *)(data + 40) = (__u16)tmpl[5];
	if (cfg_list) {
		/* Two 2-byte stores: daddr is only 2-byte aligned in the frame. */
		*(__u16 *)(data + DADDR_OFF) = (__u16)daddr;
		*(__u16 *)(data + DADDR_LO) = (__u16)(daddr >> 16);
		*(__u16 *)(data + CSUM_OFF) = ip_csum((daddr & 0xffff) + (daddr >> 16));
	} else if (cfg_prefixes) {
		*(__u16 *)(data + DADDR_LO) = lo;
		*(__u16 *)(data + CSUM_OFF) = ip_csum(lo);
	}
	return bpf_redirect(cfg_ifindex, 0);
}
