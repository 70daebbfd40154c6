/* Benchmark sink: counts and drops the generator's UDP frames to port 9, passes the rest. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

struct sink_counter {
	__u64 packets;
	__u64 bytes; /* frame length without FCS */
};

/* Per CPU: with two generator cores both CPUs count at full rate. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct sink_counter);
	__uint(max_entries, 1);
} sink_count SEC(".maps");

/* Only the benchmark's traffic is dropped; ARP, neighbour discovery and the latency test's TCP
 * must reach Linux. */
static __always_inline int is_bench_udp(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	struct udphdr *udp = (void *)(iph + 1);

	/* Shorter than any of them (an IPv4 one is the shortest). */
	if ((void *)(udp + 1) > data_end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > data_end || ip6->nexthdr != IPPROTO_UDP)
			return 0;
		return udp->dest == bpf_htons(9);
	}
	if (eth->h_proto != bpf_htons(ETH_P_IP) || iph->ihl != 5 || iph->protocol != IPPROTO_UDP)
		return 0;
	return udp->dest == bpf_htons(9);
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct sink_counter *c;
	__u32 key = 0;

	if (!is_bench_udp(data, data_end))
		return XDP_PASS;
	c = bpf_map_lookup_elem(&sink_count, &key);
	if (c) {
		c->packets++;
		c->bytes += data_end - data;
	}
	return XDP_DROP;
}
