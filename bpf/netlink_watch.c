/* Configuration changes as they happen: a tp_btf program on consume_skb, which the kernel calls
 * on a netlink request right after the family's handler has applied it and before the sender's
 * sendmsg() returns (netlink_unicast_kernel()). So a change made with ip, bridge, iptables-nft,
 * nft or ipset, or any daemon built on them, is seen here before the command that made it
 * returns. Only requests to this network namespace's kernel sockets that change something
 * (not GET dumps, not conntrack entries) count: linuxfp's own reads and other namespaces' changes
 * do not. Each one bumps the fence of the families it may change (include/fence.h) and its
 * class's counter, and wakes the controller through a ring buffer.
 *
 * The program runs for every skb the host consumes, so the first tests are the cheapest ones:
 * the skb has a socket, and that socket is a netlink one. */
#include <linux/bpf.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/ipset/ip_set.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "netlink_watch.h"
#include "fence.h"
#include "linuxfp_types.h"
#include "kernel_ns.h"
#include "fdb_map.h"

char LICENSE[] SEC("license") = "GPL";

/* The kernel's structures, as far as this program reads them (CO-RE: offsets come from the
 * running kernel's BTF). */
struct sock_common {
	unsigned short skc_family;
	possible_net_t skc_net;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

struct netlink_sock {
	__u32 flags;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct sock *sk;
	unsigned char *head;
	unsigned int tail; /* an offset from head on 64-bit kernels (NET_SKBUFF_DATA_USES_OFFSET) */
} __attribute__((preserve_access_index));

#define AF_NETLINK 16
#define NETLINK_F_KERNEL_SOCKET 0x1

/* The namespace whose changes count: the inode number of its /proc/<pid>/ns/net. */
volatile const __u32 cfg_netns = 0;
/* linuxfp's own process: its writes (the bridge FDB entries it refreshes for learning, which
 * change no forwarding decision) do not count. */
volatile const __u32 cfg_self = 0;

/* Per class: changes seen (linuxfp status shows them). Written only here. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, enum lfp_nl_class);
	__type(value, __u64);
	__uint(max_entries, LFP_NL_CLASSES);
} lfp_nl_changes SEC(".maps");

/* One record (the class, a __u32) per change; a full ring means a wake-up is pending. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} lfp_nl_events SEC(".maps");

/* rtnetlink: a request type is NEW, DEL, GET or SET in that order for each object. */
static __always_inline enum lfp_nl_class rtnl_class(__u16 type)
{
	if (type < RTM_BASE || (type & 3) == 2) /* GET */
		return LFP_NL_NONE;
	switch (type & ~3) {
	case RTM_NEWLINK:
		return LFP_NL_LINK;
	case RTM_NEWADDR:
		return LFP_NL_ADDR;
	case RTM_NEWROUTE:
	case RTM_NEWRULE:
	case RTM_NEWNEXTHOP:
		return LFP_NL_ROUTE;
	case RTM_NEWNEIGH:
		return LFP_NL_NEIGH;
	case RTM_NEWQDISC:
	case RTM_NEWTCLASS:
	case RTM_NEWTFILTER:
	case RTM_NEWCHAIN:
		return LFP_NL_TC;
	}
	/* Anything else that changes (netconf, mdb, vlan ...): counted, the controller reads all. */
	return LFP_NL_OTHER;
}

#define UNIT_IPV4 (1 << LFP_FENCE_IPV4)
#define UNIT_IPV6 (1 << LFP_FENCE_IPV6)
#define UNITS_ALL (UNIT_IPV4 | UNIT_IPV6)

/* The fence units of an address family (AF_* or NFPROTO_*: the same numbers for IPv4 and
 * IPv6); any other family (bridge, inet, unspecified ...) may concern both. */
static __always_inline __u32 family_units(__u8 family)
{
	if (family == 2) /* AF_INET, NFPROTO_IPV4 */
		return UNIT_IPV4;
	if (family == 10) /* AF_INET6, NFPROTO_IPV6 */
		return UNIT_IPV6;
	return UNITS_ALL;
}

/* Messages of a batch whose families are looked at; a longer batch is taken as both families'. */
#define BATCH_SCAN 16

/* The units an nf_tables batch may change: the family of every message up to its end. */
static __always_inline __u32 batch_units(const unsigned char *data, __u32 len)
{
	struct {
		struct nlmsghdr h;
		__u8 family;
	} m;
	__u32 off = 0, units = 0;

	for (int i = 0; i < BATCH_SCAN; i++) {
		if (off + sizeof(m) > len || bpf_probe_read_kernel(&m, sizeof(m), data + off))
			return UNITS_ALL;
		if (m.h.nlmsg_type == NFNL_MSG_BATCH_END)
			return units ? units : UNITS_ALL;
		if (i > 0)
			units |= family_units(m.family);
		if (m.h.nlmsg_len < NLMSG_HDRLEN)
			return UNITS_ALL;
		off += NLMSG_ALIGN(m.h.nlmsg_len);
	}
	return UNITS_ALL;
}

/* nfnetlink: nf_tables changes come as batches; ipset commands one by one. */
static __always_inline enum lfp_nl_class nfnl_class(const struct nlmsghdr *nlh, const unsigned char *data)
{
	__u16 subsys = nlh->nlmsg_type >> 8, cmd = nlh->nlmsg_type & 0xff;
	__u16 res_id;

	if (nlh->nlmsg_type == NFNL_MSG_BATCH_BEGIN) {
		/* struct nfgenmsg after the header: family, version, res_id (the batch's subsystem). */
		if (bpf_probe_read_kernel(&res_id, sizeof(res_id), data + NLMSG_HDRLEN + 2))
			return LFP_NL_NFTABLES;
		return bpf_ntohs(res_id) == NFNL_SUBSYS_NFTABLES ? LFP_NL_NFTABLES : LFP_NL_NONE;
	}
	switch (subsys) {
	case NFNL_SUBSYS_IPSET:
		switch (cmd) {
		case IPSET_CMD_CREATE:
		case IPSET_CMD_DESTROY:
		case IPSET_CMD_FLUSH:
		case IPSET_CMD_RENAME:
		case IPSET_CMD_SWAP:
		case IPSET_CMD_ADD:
		case IPSET_CMD_DEL:
			return LFP_NL_IPSET;
		}
		return LFP_NL_NONE;
	}
	/* nf_tables outside a batch: nfnetlink accepts only reads there. */
	return LFP_NL_NONE;
}

SEC("tp_btf/consume_skb")
int BPF_PROG(lfp_nl_consumed, struct sk_buff *skb)
{
	struct sock *sk = skb->sk;
	struct nlmsghdr nlh;
	unsigned char *data;
	enum lfp_nl_class class;
	struct lfp_fence *fence;
	__u32 units, zero = 0;
	__u8 family;
	__u64 *n;

	if (!sk || sk->__sk_common.skc_family != AF_NETLINK)
		return 0;
	/* A request lands on the kernel's socket; replies and notifications on user sockets. (The
	 * verifier knows sk as a struct sock only: the netlink_sock around it is read, not loaded.) */
	if (!(BPF_CORE_READ((struct netlink_sock *)sk, flags) & NETLINK_F_KERNEL_SOCKET))
		return 0;
	if (sk->__sk_common.skc_net.net->ns.inum != cfg_netns)
		return 0;
	/* The handler has pulled the messages it processed (netlink_rcv_skb()): they start at the
	 * head, where netlink_sendmsg() copied them. */
	data = skb->head;
	if (skb->tail < sizeof(nlh) || bpf_probe_read_kernel(&nlh, sizeof(nlh), data))
		return 0;
	if (!(nlh.nlmsg_flags & NLM_F_REQUEST))
		return 0;
	/* The request is consumed in its sender's sendmsg(). */
	if (bpf_get_current_pid_tgid() >> 32 == cfg_self)
		return 0;
	switch (sk->sk_protocol) {
	case NETLINK_ROUTE:
		class = rtnl_class(nlh.nlmsg_type);
		break;
	case NETLINK_NETFILTER:
		class = nfnl_class(&nlh, data);
		break;
	default:
		return 0;
	}
	if (class == LFP_NL_NONE)
		return 0;
	switch (class) {
	case LFP_NL_ADDR:
	case LFP_NL_ROUTE:
	case LFP_NL_NEIGH:
		/* ifaddrmsg, rtmsg, fib_rule_hdr, nhmsg, ndmsg: the family comes first. */
		if (bpf_probe_read_kernel(&family, 1, data + NLMSG_HDRLEN))
			units = UNITS_ALL;
		else
			units = family_units(family);
		break;
	case LFP_NL_NFTABLES:
		units = batch_units(data, skb->tail);
		break;
	case LFP_NL_IPSET:
		/* A set's family is not in the command. */
		units = UNITS_ALL;
		break;
	default:
		/* Links, tc and the rest are not fenced yet: the data plane follows them by
		 * notification (a few ms late); fenced by family, each pod a CNI plugin adds would
		 * hand every packet of both families to Linux for as long as its commands take. */
		units = 0;
	}
	fence = bpf_map_lookup_elem(&lfp_fence_map, &zero);
	if (fence) {
		if (units & UNIT_IPV4)
			__sync_fetch_and_add(&fence->seq[LFP_FENCE_IPV4], 1);
		if (units & UNIT_IPV6)
			__sync_fetch_and_add(&fence->seq[LFP_FENCE_IPV6], 1);
	}
	n = bpf_map_lookup_elem(&lfp_nl_changes, &class);
	if (n)
		__sync_fetch_and_add(n, 1);
	bpf_ringbuf_output(&lfp_nl_events, &class, sizeof(class), 0);
	return 0;
}

/* The bridge's own FDB changes (learning, a MAC moving to another port, ageing, flushes) happen
 * in its data path and timers, not over netlink: the controller hears of them by notification, a
 * few ms later. Meanwhile the fast path's mirror (lfp_fdb, the data plane's map) would send
 * frames to a moved address to its old port. So the moment the bridge moves, creates or deletes
 * an entry, its mirror entry is deleted here (frames to that address go to Linux, which knows
 * where it is) and the controller is told, so that its next apply writes the entry afresh.
 * Only VLAN 0 entries are mirrored (vlan_filtering bridges are Linux's). */
struct net_device {
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct net_bridge {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct mac_addr {
	unsigned char addr[6];
} __attribute__((preserve_access_index));

struct net_bridge_fdb_key {
	struct mac_addr addr;
	__u16 vlan_id;
} __attribute__((preserve_access_index));

struct net_bridge_fdb_entry {
	struct net_bridge_fdb_key key;
} __attribute__((preserve_access_index));

/* One record (struct lfp_fdb_key) per entry forgotten. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lfp_fdb_changes SEC(".maps");

static __always_inline void fdb_forget(struct net_bridge *br, const unsigned char *addr, __u16 vid)
{
	struct lfp_fdb_key k = {};
	struct lfp_fdb_key *rec;

	if (vid || BPF_CORE_READ(br, dev, nd_net.net, ns.inum) != cfg_netns)
		return;
	k.bridge = BPF_CORE_READ(br, dev, ifindex);
	if (bpf_probe_read_kernel(k.mac, sizeof(k.mac), addr))
		return;
	bpf_map_delete_elem(&lfp_fdb, &k);
	rec = bpf_ringbuf_reserve(&lfp_fdb_changes, sizeof(*rec), 0);
	if (rec) {
		*rec = k;
		bpf_ringbuf_submit(rec, 0);
	}
}

SEC("tp_btf/br_fdb_update")
int BPF_PROG(lfp_fdb_moved, struct net_bridge *br, void *source, const unsigned char *addr, __u16 vid)
{
	fdb_forget(br, addr, vid);
	return 0;
}

SEC("tp_btf/fdb_delete")
int BPF_PROG(lfp_fdb_deleted, struct net_bridge *br, struct net_bridge_fdb_entry *f)
{
	fdb_forget(br, f->key.addr.addr, BPF_CORE_READ(f, key.vlan_id));
	return 0;
}
