/* Benchmark generator: rewrites each live frame from a template and redirects it out of gen. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* Live-frame pages are recycled without being re-initialised, and the DUT rewrites what it
 * forwards (MACs, TTL, checksum) in place: every run starts again from this template. It is the
 * Ethernet + IPv4 + UDP header (42 bytes, padded to 48) with daddr 198.19.0.0 (or, with
 * cfg_prefixes 0, the one destination with its checksum). Not const: the
 * lengths change with the frame size, and one program, parked once in the XDP dispatcher, serves
 * every size (see newGenerator in internal/bench). */
__u64 tmpl[6] = {};
/* ~(IPv4 checksum of the template): adding the varying daddr word to it gives the new sum. */
__u32 tmpl_csum_acc = 0;
/* Routed prefixes on the DUT: destinations cycle through 198.19.0..prefixes-1. 0: every frame
 * goes to the template's destination (a host across a bridge); the verifier drops the rest. */
volatile const __u32 cfg_prefixes = 50;
/* gen's eth0, in the namespace the test run executes in. */
volatile const __u32 cfg_ifindex = 0;

#define HDR_LEN   (14 + 20 + 8)
#define CSUM_OFF  (14 + 10)
#define DADDR_LO  (14 + 18) /* the last two bytes of daddr: 198.19.<prefix>.<host> */

struct gen_state {
	__u64 packets; /* frames generated on this CPU, for the offered rate */
	__u32 prefix;  /* 198.19.<prefix>.<host + 1> */
	__u32 host;
};

/* Per CPU, so the generator's cores never share a cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct gen_state);
	__uint(max_entries, 1);
} gen_states SEC(".maps");

/* Next destination: prefix after prefix, then the next host, without a division per packet. */
static __always_inline __u16 next_daddr_lo(struct gen_state *s)
{
	__u32 p = s->prefix, h = s->host + 1;

	if (++s->prefix >= cfg_prefixes) {
		s->prefix = 0;
		if (++s->host >= 254)
			s->host = 0;
	}
	/* Bytes p, h in memory order: the little-endian load of that word. */
	return (__u16)(p | (h << 8));
}

/* RFC 1624 incremental update: the template's daddr word is 0, so only this word adds in. */
static __always_inline __u16 ip_csum(__u16 word)
{
	__u32 sum = tmpl_csum_acc + word;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

SEC("xdp")
int bench_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct gen_state *s;
	__u32 key = 0;
	__u16 lo = 0;

	if (data + HDR_LEN > data_end)
		return XDP_ABORTED;
	s = bpf_map_lookup_elem(&gen_states, &key);
	if (!s)
		return XDP_ABORTED;
	s->packets++;
	if (cfg_prefixes)
		lo = next_daddr_lo(s);

	/* 8-byte stores: the header starts 8-byte aligned in a live frame, and a byte-wise memcpy
	 * would cost more than the rest of the program. */
	((__u64 *)data)[0] = tmpl[0];
	((__u64 *)data)[1] = tmpl[1];
	((__u64 *)data)[2] = tmpl[2];
	((__u64 *)data)[3] = tmpl[3];
	((__u64 *)data)[4] = tmpl[4];
	*(__u16 *)(data + 40) = (__u16)tmpl[5];
	if (cfg_prefixes) {
		*(__u16 *)(data + DADDR_LO) = lo;
		*(__u16 *)(data + CSUM_OFF) = ip_csum(lo);
	}
	return bpf_redirect(cfg_ifindex, 0);
}
