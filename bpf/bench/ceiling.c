/* Benchmark ceiling: redirect to out0 with no lookup and no checks: the XDP limit. A router
 * (MAC rewrite + redirect) by default, a switch (the frame as it is + redirect) with cfg_l2. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "GPL";

/* Destination then source MAC (the sink's, out0's) as three words: three stores per frame. */
volatile const __u32 cfg_eth[3] = {};
/* 1: L2, the bridge benchmark's ceiling: frames leave unmodified (the generator already
 * addresses them to the sink), cfg_eth is unused and the verifier drops the rewrite. */
volatile const __u32 cfg_l2 = 0;

/* Key 0: out0. A devmap, as a real forwarder would use, so redirects are flushed in bulk. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
	__uint(max_entries, 1);
} ceiling_tx SEC(".maps");

SEC("xdp")
int bench_ceiling(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	/* The one check: ARP and IPv6 neighbour discovery stay with Linux, so neighbours keep
	 * resolving during ceiling rounds (and, on a bridge port, so the bridge keeps learning from
	 * the benchmark's non-IP frames). IPv4 frames go, and IPv6 ones with UDP right after the
	 * header: the generator's. */
	if (eth->h_proto != bpf_htons(ETH_P_IP)) {
		if (eth->h_proto != bpf_htons(ETH_P_IPV6) || (void *)(ip6 + 1) > data_end ||
		    ip6->nexthdr != IPPROTO_UDP)
			return XDP_PASS;
	}
	if (!cfg_l2) {
		((__u32 *)data)[0] = cfg_eth[0];
		((__u32 *)data)[1] = cfg_eth[1];
		((__u32 *)data)[2] = cfg_eth[2];
	}
	return bpf_redirect_map(&ceiling_tx, 0, 0);
}
