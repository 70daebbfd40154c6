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
#include <linux/if_link.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/ipset/ip_set.h>
#include <asm-generic/errno-base.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "netlink_watch.h"
#include "fence.h"
#include "linuxfp_types.h"
#include "kernel_ns.h"
#include "fdb_map.h"
#include "fibcache_map.h"
#include "neigh_map.h"
#include "ct_frees_map.h"

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
/* linuxfp's own process: its writes (the tc programs it attaches after XDP, which change no
 * forwarding decision) do not count. */
volatile const __u32 cfg_self = 0;

/* Per class: changes seen (linuxfp status shows them). Written only here. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, enum lfp_nl_class);
	__type(value, __u64);
	__uint(max_entries, LFP_NL_CLASSES);
} lfp_nl_changes SEC(".maps");

/* One struct lfp_nl_event per request that changed something; a full ring means a wake-up is
 * pending (the controller re-reads everything when the fence stays closed). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lfp_nl_events SEC(".maps");

/* Names the record's type in BTF for bpf2go (a ring buffer's map has no value type). */
const struct lfp_nl_event *lfp_nl_event_type __attribute__((unused));

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
#define UNIT_LINK (1 << LFP_FENCE_LINK)

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

/* Messages of one request looked at; a longer request is taken as changing everything. */
#define MSG_SCAN 16
/* Attributes of one message looked at; a message with more is taken as it comes. */
#define ATTR_SCAN 16

/* The functions below that read a request are global: the verifier checks each once, on its
 * own, instead of once per path through the loops that call them (inlined, the message and
 * attribute loops multiply past its limit). So they take the request's kernel address as a
 * number and read it with bpf_probe_read_kernel(). */

/* The attribute types (below 63) of a message at msg whose attributes start at off, one bit each;
 * ATTRS_UNREAD when they could not all be read (malformed, or more than ATTR_SCAN). */
#define ATTR(t) ((__u64)1 << (t))
#define ATTRS_UNREAD ATTR(63)

__noinline __u64 attr_types(__u64 msg, __u32 off, __u32 len)
{
	struct nlattr a;
	__u64 types = 0;
	__u16 t;

	for (int i = 0; i < ATTR_SCAN; i++) {
		if (off >= len)
			return types;
		if (off + sizeof(a) > len || bpf_probe_read_kernel(&a, sizeof(a), (void *)(msg + off)) ||
		    a.nla_len < sizeof(a))
			return types | ATTRS_UNREAD;
		t = a.nla_type & NLA_TYPE_MASK;
		if (t < 63)
			types |= ATTR(t);
		off += NLA_ALIGN(a.nla_len);
	}
	return off >= len ? types : types | ATTRS_UNREAD;
}

/* Whether the controller asked for routes longer than a FIB cache block to be counted. */
static __always_inline int fib_count_long(void)
{
	struct lfp_fib_gen *g;
	__u32 zero = 0;

	g = bpf_map_lookup_elem(&lfp_fib_gen, &zero);
	return g && g->count_long;
}

/* struct rtmsg, as far as it is read. */
struct rtmsg_head {
	__u8 family, dst_len, src_len, tos, table, protocol, scope, type;
};

/* Whether a route request (at msg, len bytes, its header's type and flags) leaves what the
 * controller reads of the routing tables as it was or smaller, so that the data plane, which
 * forwards with the kernel's live FIB (bpf_fib_lookup), stays exact without waiting for it.
 * The controller reads of routes only what the FIB lookup does not tell (observe's Routes):
 * local, broadcast, anycast and multicast routes (martian sources), MTU and hoplimit metrics,
 * multipath routes and nexthop objects; each of them only ever sends more packets to Linux. A
 * deletion can only take such a route away, and a replaced route loses its old attributes:
 * what the data plane holds until the controller has read again is then a superset, still
 * exact. A new route is fenced when it is itself such a route, or may become part of one (an
 * IPv6 route added without NLM_F_EXCL joins a route of the same prefix and metric as a
 * multipath sibling). */
__noinline int route_plain(__u64 msg, __u32 len, __u32 type, __u32 flags)
{
	struct rtmsg_head rt;
	__u64 types;

	if (type == RTM_DELROUTE)
		return 1;
	if (type != RTM_NEWROUTE)
		return 0;
	if (bpf_probe_read_kernel(&rt, sizeof(rt), (void *)(msg + NLMSG_HDRLEN)))
		return 0;
	switch (rt.type) {
	case RTN_UNICAST:
	case RTN_BLACKHOLE:
	case RTN_UNREACHABLE:
	case RTN_PROHIBIT:
	case RTN_THROW:
		break;
	default:
		return 0;
	}
	if (rt.family == 10 && !(flags & (NLM_F_REPLACE | NLM_F_EXCL)))
		return 0;
	/* The FIB cache's key holds no source (an IPv6 source-specific route), and it answers for
	 * blocks that no longer route splits (lib/fibcache.h). */
	if (rt.src_len || (fib_count_long() && rt.dst_len > (rt.family == 10 ? LFP_FIB_BLOCK6 : LFP_FIB_BLOCK4)))
		return 0;
	types = attr_types(msg, NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct rtmsg)), len);
	/* RTA_EXPIRES: an IPv6 route that expires leaves the FIB without a request. */
	return !(types & (ATTRS_UNREAD | ATTR(RTA_METRICS) | ATTR(RTA_MULTIPATH) | ATTR(RTA_NH_ID) | ATTR(RTA_EXPIRES)));
}

/* struct ifinfomsg, as far as it is read. */
struct ifinfo_head {
	__u8 family, pad;
	__u16 type;
	__s32 index;
};

/* Whether a link request (at msg, len bytes) changes something the data plane holds of an
 * existing device: its MAC address (frames to the old one are not for us any more), MTU,
 * name (iptables' -i and -o match names), bridge master, its kind's options (a bridge's
 * vlan_filtering ...), or, over AF_BRIDGE, a bridge port's state, flags and VLANs. Those are
 * counted in both families. A device created (ip link add, NLM_F_CREATE) holds nothing yet; a
 * device deleted or moved to another namespace takes its routes and its place in the data
 * plane's redirect maps with it, in the kernel, at once; a device going down or up changes
 * what the kernel's FIB answers live, and a bridge port going down forwards nothing in Linux
 * nor in the fast path (a redirect to a down device is dropped). Not counting those keeps a
 * CNI plugin's pod setup (add, move, up) from handing every packet to Linux, but for its
 * one `master` request. */
__noinline int link_fenced(__u64 msg, __u32 len, __u32 type, __u32 flags)
{
	struct ifinfo_head ifi;
	__u64 types;

	if (bpf_probe_read_kernel(&ifi, sizeof(ifi), (void *)(msg + NLMSG_HDRLEN)))
		return 1;
	if (ifi.family == 7) /* AF_BRIDGE: bridge port settings, VLANs */
		return 1;
	if (type == RTM_DELLINK || (type == RTM_NEWLINK && (flags & NLM_F_CREATE)))
		return 0;
	types = attr_types(msg, NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct ifinfomsg)), len);
	return !!(types & (ATTRS_UNREAD | ATTR(IFLA_ADDRESS) | ATTR(IFLA_MTU) | ATTR(IFLA_IFNAME) |
			   ATTR(IFLA_MASTER) | ATTR(IFLA_PROTINFO) | ATTR(IFLA_LINKINFO) | ATTR(IFLA_AF_SPEC)));
}

/* The ipsets whose changes are fenced: those the data plane's rules test, by name, written by
 * the controller before it reads them (observe's watchSets). The all-zero name stands for every
 * set (from loading until the controller has said which). */
struct lfp_set_name {
	char name[IPSET_MAXNAMELEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_set_name);
	__type(value, __u8);
	__uint(max_entries, LFP_NL_SETS);
} lfp_nl_sets SEC(".maps");

/* Whether the set named by the attribute at attr (IPSET_ATTR_SETNAME or SETNAME2) is watched. */
__noinline int set_watched(__u64 attr)
{
	struct lfp_set_name k = {};
	int end = 0;

	if (bpf_probe_read_kernel(k.name, sizeof(k.name), (void *)(attr + NLA_HDRLEN)))
		return 1;
	for (int i = 0; i < IPSET_MAXNAMELEN; i++) {
		end |= k.name[i] == 0;
		if (end)
			k.name[i] = 0;
	}
	return bpf_map_lookup_elem(&lfp_nl_sets, &k) != 0;
}

/* Whether an ipset command (at msg, len bytes) may change a set the data plane uses: it names
 * one that is watched, or names none (flush and destroy of every set). */
__noinline int ipset_fenced(__u64 msg, __u32 len, __u32 cmd)
{
	struct lfp_set_name all = {};
	struct nlattr a;
	__u32 off;
	int named = 0;

	if (bpf_map_lookup_elem(&lfp_nl_sets, &all))
		return 1;
	off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(struct nfgenmsg));
	for (int i = 0; i < ATTR_SCAN; i++) {
		if (off >= len)
			return !named;
		if (off + sizeof(a) > len || bpf_probe_read_kernel(&a, sizeof(a), (void *)(msg + off)) ||
		    a.nla_len < sizeof(a))
			return 1;
		switch (a.nla_type & NLA_TYPE_MASK) {
		case IPSET_ATTR_SETNAME:
			named = 1;
			if (set_watched(msg + off))
				return 1;
			break;
		case IPSET_ATTR_SETNAME2: /* IPSET_ATTR_TYPENAME in a create */
			if (cmd != IPSET_CMD_CREATE && set_watched(msg + off))
				return 1;
			break;
		}
		off += NLA_ALIGN(a.nla_len);
	}
	return 1;
}

/* The units an nf_tables batch (at data, len bytes) may change: the family of every message up
 * to its end. */
__noinline __u32 batch_units(__u64 data, __u32 len)
{
	struct {
		struct nlmsghdr h;
		__u8 family;
	} m;
	__u32 off = 0, units = 0;

	for (int i = 0; i < MSG_SCAN; i++) {
		if (off + sizeof(m) > len || bpf_probe_read_kernel(&m, sizeof(m), (void *)(data + off)))
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

/* What the message functions say of one message, packed in one number: the bytes to the next
 * one (0: stop here; a message is at most MSG_MAX bytes), its class, the fence units it may
 * concern and, for the link unit, the device. */
#define MSG_MAX 0xffffff
#define MSG_STEP(r) ((__u32)(r) & MSG_MAX)
#define MSG_CLASS(r) (((r) >> 24) & 0xff)
#define MSG_UNITS(r) (((r) >> 32) & 0xf)
#define MSG_FIB(r) (((r) >> 36) & 3) /* the FIB cache's families (FIB_IPV4, FIB_IPV6) */
#define MSG_QUIET ((__u64)1 << 40) /* an ipset command on a set no rule tests */
#define MSG_IFINDEX(r) ((__u32)((r) >> 42))
#define MSG_IFINDEX_MAX ((1 << 22) - 1)
#define MSG(step, class, units) ((__u64)(step) | (__u64)(class) << 24 | (__u64)(units) << 32)
#define MSG_FIBS(fib) ((__u64)(fib) << 36)
#define FIB_IPV4 1
#define FIB_IPV6 2
#define FIB_BOTH 3

/* The FIB cache's families a request for an object of family (AF_*) may concern. */
static __always_inline __u32 family_fibs(__u8 family)
{
	if (family == 2)
		return FIB_IPV4;
	if (family == 10)
		return FIB_IPV6;
	return FIB_BOTH;
}

/* One rtnetlink message at msg, rest bytes before the request's end. */
__noinline __u64 rtnl_message(__u64 msg, __u32 rest)
{
	struct nlmsghdr h;
	struct ifinfo_head ifi;
	enum lfp_nl_class class;
	__u32 step, units = 0, fibs = 0;
	__u8 family;

	if (rest < sizeof(h) || bpf_probe_read_kernel(&h, sizeof(h), (void *)msg) ||
	    h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > rest)
		return 0;
	if (h.nlmsg_len > MSG_MAX)
		return MSG(0, LFP_NL_OTHER, UNITS_ALL);
	step = NLMSG_ALIGN(h.nlmsg_len);
	if (!(h.nlmsg_flags & NLM_F_REQUEST))
		return MSG(step, LFP_NL_NONE, 0);
	class = rtnl_class(h.nlmsg_type);
	/* What bpf_fib_lookup() answers may change with any request for a link, an address, a
	 * route, a rule, a nexthop or a neighbour, counted by the fence or not (lib/fibcache.h). */
	switch (class) {
	case LFP_NL_ROUTE:
	case LFP_NL_ADDR:
	case LFP_NL_NEIGH:
		if (bpf_probe_read_kernel(&family, 1, (void *)(msg + NLMSG_HDRLEN)))
			fibs = FIB_BOTH;
		else
			fibs = family_fibs(family);
		break;
	case LFP_NL_LINK:
	case LFP_NL_OTHER:
		fibs = FIB_BOTH;
		break;
	default:
		break;
	}
	switch (class) {
	case LFP_NL_ROUTE:
		if (route_plain(msg, h.nlmsg_len, h.nlmsg_type, h.nlmsg_flags))
			break;
		/* fallthrough */
	case LFP_NL_ADDR:
	case LFP_NL_NEIGH:
		/* ifaddrmsg, rtmsg, fib_rule_hdr, nhmsg, ndmsg: the family comes first. */
		if (bpf_probe_read_kernel(&family, 1, (void *)(msg + NLMSG_HDRLEN)))
			units = UNITS_ALL;
		else
			units = family_units(family);
		break;
	case LFP_NL_LINK:
		if (!link_fenced(msg, h.nlmsg_len, h.nlmsg_type, h.nlmsg_flags))
			break;
		/* Per device; a device named only by its name (no index) in both families. */
		if (bpf_probe_read_kernel(&ifi, sizeof(ifi), (void *)(msg + NLMSG_HDRLEN)) ||
		    ifi.index <= 0 || ifi.index > MSG_IFINDEX_MAX)
			units = UNITS_ALL;
		else
			return MSG(step, class, UNIT_LINK) | MSG_FIBS(fibs) | (__u64)ifi.index << 42;
		break;
	default:
		/* tc and the rest are not fenced: the data plane follows them by notification (a
		 * few ms late). */
		break;
	}
	return MSG(step, class, units) | MSG_FIBS(fibs);
}

/* One nfnetlink message at msg, rest bytes before the request's end (an nf_tables batch is
 * read whole from its first message). */
__noinline __u64 nfnl_message(__u64 msg, __u32 rest)
{
	struct nlmsghdr h;
	__u32 step;
	__u16 res_id;
	__u8 cmd;

	if (rest < sizeof(h) || bpf_probe_read_kernel(&h, sizeof(h), (void *)msg) ||
	    h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > rest)
		return 0;
	step = NLMSG_ALIGN(h.nlmsg_len);
	if (!(h.nlmsg_flags & NLM_F_REQUEST))
		return MSG(step, LFP_NL_NONE, 0);
	if (h.nlmsg_type == NFNL_MSG_BATCH_BEGIN) {
		/* struct nfgenmsg after the header: family, version, res_id (the batch's subsystem).
		 * nf_tables changes come only in batches (outside one nfnetlink accepts reads). */
		if (!bpf_probe_read_kernel(&res_id, sizeof(res_id), (void *)(msg + NLMSG_HDRLEN + 2)) &&
		    bpf_ntohs(res_id) != NFNL_SUBSYS_NFTABLES)
			return 0;
		return MSG(0, LFP_NL_NFTABLES, batch_units(msg, rest));
	}
	if (h.nlmsg_type >> 8 != NFNL_SUBSYS_IPSET)
		return MSG(step, LFP_NL_NONE, 0);
	cmd = h.nlmsg_type & 0xff;
	switch (cmd) {
	case IPSET_CMD_CREATE:
	case IPSET_CMD_DESTROY:
	case IPSET_CMD_FLUSH:
	case IPSET_CMD_RENAME:
	case IPSET_CMD_SWAP:
	case IPSET_CMD_ADD:
	case IPSET_CMD_DEL:
		/* A set's family is not in the command. */
		if (ipset_fenced(msg, h.nlmsg_len, cmd))
			return MSG(step, LFP_NL_IPSET, UNITS_ALL);
		return MSG(step, LFP_NL_IPSET, 0) | MSG_QUIET;
	}
	return MSG(step, LFP_NL_NONE, 0);
}

/* The FIB cache's generation moves on for the families in fibs (FIB_IPV4, FIB_IPV6). */
static __always_inline void fib_moved(__u32 fibs)
{
	struct lfp_fib_gen *g;
	__u32 zero = 0;

	if (!fibs)
		return;
	g = bpf_map_lookup_elem(&lfp_fib_gen, &zero);
	if (!g)
		return;
	if (fibs & FIB_IPV4)
		__sync_fetch_and_add(&g->gen[0], 1);
	if (fibs & FIB_IPV6)
		__sync_fetch_and_add(&g->gen[1], 1);
}

SEC("tp_btf/consume_skb")
int BPF_PROG(lfp_nl_consumed, struct sk_buff *skb)
{
	struct sock *sk = skb->sk;
	__u32 n[LFP_NL_CLASSES] = {}, quiet_ipset = 0, units = 0, fibs = 0;
	struct lfp_nl_event ev = {};
	struct lfp_fence *fence;
	__u32 off = 0, len, zero = 0, link_if = 0;
	__u64 head, r;
	__u16 proto;
	int i;

	if (!sk || sk->__sk_common.skc_family != AF_NETLINK)
		return 0;
	/* A request lands on the kernel's socket; replies and notifications on user sockets. (The
	 * verifier knows sk as a struct sock only: the netlink_sock around it is read, not loaded.) */
	if (!(BPF_CORE_READ((struct netlink_sock *)sk, flags) & NETLINK_F_KERNEL_SOCKET))
		return 0;
	if (sk->__sk_common.skc_net.net->ns.inum != cfg_netns)
		return 0;
	proto = sk->sk_protocol;
	if (proto != NETLINK_ROUTE && proto != NETLINK_NETFILTER)
		return 0;
	/* The request is consumed in its sender's sendmsg(). */
	if (bpf_get_current_pid_tgid() >> 32 == cfg_self)
		return 0;
	/* The handler has pulled the messages it processed (netlink_rcv_skb()): they start at the
	 * head, where netlink_sendmsg() copied them. (Read, so that it is a number; see above.) */
	head = (__u64)BPF_CORE_READ(skb, head);
	len = skb->tail;
	for (i = 0; i < MSG_SCAN && off < len; i++) {
		if (proto == NETLINK_ROUTE)
			r = rtnl_message(head + off, len - off);
		else
			r = nfnl_message(head + off, len - off);
		if (MSG_UNITS(r) & UNIT_LINK) {
			/* One device per request is counted as such; another one in both families. */
			if (link_if)
				units |= UNITS_ALL;
			else
				link_if = MSG_IFINDEX(r);
		}
		units |= MSG_UNITS(r);
		fibs |= MSG_FIB(r);
		if (MSG_CLASS(r) < LFP_NL_CLASSES)
			n[MSG_CLASS(r)]++;
		if (r & MSG_QUIET)
			quiet_ipset++;
		if (!MSG_STEP(r))
			break;
		off += MSG_STEP(r);
	}
	if (i == MSG_SCAN && off < len) {
		/* More messages than are looked at: whatever they are, every unit. */
		n[LFP_NL_OTHER]++;
		units = UNITS_ALL;
		fibs = proto == NETLINK_ROUTE ? FIB_BOTH : 0;
	}
	fib_moved(fibs);
	/* The device's entry says "being counted" (all ones, above any count the data plane
	 * follows) before the unit's count moves, and then the count it was given. A full map:
	 * both families instead. */
	if (units & UNIT_LINK) {
		__u64 pending = ~0ULL;

		if (bpf_map_update_elem(&lfp_if_fence, &link_if, &pending, BPF_ANY))
			units = (units & ~UNIT_LINK) | UNITS_ALL;
	}
	fence = bpf_map_lookup_elem(&lfp_fence_map, &zero);
	if (fence) {
		if (units & UNIT_IPV4)
			ev.seq[LFP_FENCE_IPV4] = __sync_fetch_and_add(&fence->seq[LFP_FENCE_IPV4], 1) + 1;
		if (units & UNIT_IPV6)
			ev.seq[LFP_FENCE_IPV6] = __sync_fetch_and_add(&fence->seq[LFP_FENCE_IPV6], 1) + 1;
		if (units & UNIT_LINK) {
			__u64 *changed = bpf_map_lookup_elem(&lfp_if_fence, &link_if);

			ev.seq[LFP_FENCE_LINK] = __sync_fetch_and_add(&fence->seq[LFP_FENCE_LINK], 1) + 1;
			/* In place: an update could fail to allocate and leave the device's entry at all
			 * ones, its packets Linux's until its next change. */
			if (changed)
				*(volatile __u64 *)changed = ev.seq[LFP_FENCE_LINK];
		}
	}
	for (__u32 c = LFP_NL_NONE + 1; c < LFP_NL_CLASSES; c++) {
		__u64 *cnt;

		if (!n[c])
			continue;
		cnt = bpf_map_lookup_elem(&lfp_nl_changes, &c);
		if (cnt)
			__sync_fetch_and_add(cnt, n[c]);
		/* Changes to sets no rule tests need no read. */
		if (c == LFP_NL_IPSET && n[c] == quiet_ipset)
			continue;
		ev.classes |= 1 << c;
	}
	/* A change the fence counted keeps its families with Linux until the controller has read
	 * it, and a route change it did not count must still be read: wake the controller. */
	if (ev.classes || units)
		bpf_ringbuf_output(&lfp_nl_events, &ev, sizeof(ev), 0);
	return 0;
}

/* The bridge's own FDB changes (learning, a MAC moving to another port, ageing, flushes) happen
 * in its data path and timers, not over netlink: each one is counted here the moment the bridge
 * makes it, in the moves map the data plane reads (include/fdb_map.h explains how that keeps the
 * fast path's mirror from using an entry the change made stale), and the controller is told,
 * so that its next apply reads the FDB. Both tracepoints fire after the entry's new port is
 * written. Only VLAN 0 entries are mirrored (vlan_filtering bridges are Linux's). */
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

/* One record (struct lfp_fdb_key) per change counted. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lfp_fdb_changes SEC(".maps");

/* Names the record's type in BTF for bpf2go. */
const struct lfp_fdb_key *lfp_fdb_key_type __attribute__((unused));

static __always_inline void fdb_changed(struct net_bridge *br, const unsigned char *addr, __u16 vid)
{
	struct lfp_fdb_key k = {};
	struct lfp_fdb_key *rec;
	__u64 *n;
	__u32 b;

	if (vid || BPF_CORE_READ(br, dev, nd_net.net, ns.inum) != cfg_netns)
		return;
	k.bridge = BPF_CORE_READ(br, dev, ifindex);
	if (bpf_probe_read_kernel(k.mac, sizeof(k.mac), addr))
		return;
	b = fdb_bucket(k.bridge, k.mac);
	n = bpf_map_lookup_elem(&lfp_fdb_moves, &b);
	if (n)
		__sync_fetch_and_add(n, 1);
	rec = bpf_ringbuf_reserve(&lfp_fdb_changes, sizeof(*rec), 0);
	if (rec) {
		*rec = k;
		bpf_ringbuf_submit(rec, 0);
	}
}

SEC("tp_btf/br_fdb_update")
int BPF_PROG(lfp_fdb_moved, struct net_bridge *br, void *source, const unsigned char *addr, __u16 vid)
{
	fdb_changed(br, addr, vid);
	return 0;
}

SEC("tp_btf/fdb_delete")
int BPF_PROG(lfp_fdb_deleted, struct net_bridge *br, struct net_bridge_fdb_entry *f)
{
	fdb_changed(br, f->key.addr.addr, BPF_CORE_READ(f, key.vlan_id));
	return 0;
}

/* The neighbour table changes by itself: an entry learns a new address or state from an ARP or
 * ND packet, its timer moves it on (REACHABLE, STALE, PROBE, FAILED), a packet Linux sends moves
 * a STALE one to DELAY, it is removed (garbage collection, its device going down or away, the
 * device's routes with it). These tracepoints fire after the change. Each one keeps the data
 * plane's STALE mirror (include/neigh_map.h, lib/neigh.h) exact, and moves the FIB cache's
 * generation on: bpf_fib_lookup() answers with a neighbour's address and only for a valid one
 * (lib/fibcache.h). */
struct neigh_table {
	int family;
} __attribute__((preserve_access_index));

struct neighbour {
	struct neigh_table *tbl;
	struct net_device *dev;
	__u8 nud_state;
	unsigned char primary_key[0];
} __attribute__((preserve_access_index));

#define NUD_STALE 0x04

/* The tracepoints' part of k's bucket count (include/neigh_map.h). */
static __always_inline void stale_count(const struct lfp_neigh_key *k, __s64 d)
{
	__u32 b = neigh_bucket(k);
	__s64 *c = bpf_map_lookup_elem(&lfp_stale_filter, &b);

	if (c)
		__sync_fetch_and_add(c, d);
}

/* Wakes the controller to read the neighbours. */
static __always_inline void neigh_wake(void)
{
	struct lfp_nl_event ev = { .classes = 1 << LFP_NL_NEIGH };

	bpf_ringbuf_output(&lfp_nl_events, &ev, sizeof(ev), 0);
}

/* A STALE neighbour the set has no room for: the data plane hands every packet to a neighbour
 * to Linux until the controller has written the set again (lib/neigh.h). The controller is
 * woken to read the neighbours after the count moved: the change's own netlink notification
 * comes before this tracepoint (__neigh_update() notifies, then traces), and a read it caused
 * may have seen the count before the loss; the next notification may be seconds away (a STALE
 * neighbour's DELAY ends after delay_probe_time). */
static __always_inline void stale_lost(void)
{
	__u32 k = 0;
	struct lfp_stale_count *c = bpf_map_lookup_elem(&lfp_stale_count, &k);

	if (c)
		__sync_fetch_and_add(&c->lost, 1);
}

/* Whether the controller's last writing of the set did not fit (LFP_STALE_NOT_COVERED). Then
 * every neighbour change wakes it: the neighbour it could not write may have left STALE, and
 * Linux notifies no such move to DELAY; without a wake, packets to neighbours would go to Linux
 * until the next notification, delay_probe_time away. */
static __always_inline int stale_uncovered(void)
{
	__u32 k = 1;
	const struct lfp_stale_count *c = bpf_map_lookup_elem(&lfp_stale_count, &k);

	return c && c->lost == LFP_STALE_NOT_COVERED;
}

static __always_inline void neigh_changed(struct neighbour *n, int removed)
{
	struct lfp_neigh_key k = {};
	struct lfp_stale_val v = {};
	int family, stale;
	long err = 0;

	if (BPF_CORE_READ(n, dev, nd_net.net, ns.inum) != cfg_netns)
		return;
	family = BPF_CORE_READ(n, tbl, family);
	if (family != 2 && family != 10)
		return;
	stale = !removed && BPF_CORE_READ(n, nud_state) == NUD_STALE;
	k.ifindex = BPF_CORE_READ(n, dev, ifindex);
	k.family = family;
	if (bpf_probe_read_kernel(k.addr, family == 2 ? 4 : 16,
				  (void *)n + bpf_core_field_offset(struct neighbour, primary_key))) {
		/* No key: a STALE neighbour is lost as where the set is full. (One that left
		 * STALE keeps its entry: its next packet goes to Linux, which changes nothing.) */
		err = -EFAULT;
	} else if (stale) {
		/* Already there: it keeps its mark (the packet that moves it on went to Linux). */
		stale_count(&k, 1);
		err = bpf_map_update_elem(&lfp_stale, &k, &v, BPF_NOEXIST);
		if (err)
			stale_count(&k, -1);
		if (err == -EEXIST)
			err = 0;
	} else if (!bpf_map_delete_elem(&lfp_stale, &k)) {
		stale_count(&k, -1);
	}
	if (stale && err)
		stale_lost();
	if ((stale && err) || stale_uncovered())
		neigh_wake();
	/* After the set: a FIB cache answer keeps whether its next hop was in the set when it was
	 * filled (lib/fibcache.h), so the generation must move on after the set changed, not
	 * before (a fill in between would keep "not STALE" under the new generation). */
	fib_moved(family_fibs(family));
}

SEC("tp_btf/neigh_update_done")
int BPF_PROG(lfp_neigh_updated, struct neighbour *n, int err)
{
	neigh_changed(n, 0);
	return 0;
}

SEC("tp_btf/neigh_timer_handler")
int BPF_PROG(lfp_neigh_timer, struct neighbour *n, int state)
{
	neigh_changed(n, 0);
	return 0;
}

SEC("tp_btf/neigh_event_send_done")
int BPF_PROG(lfp_neigh_sent, struct neighbour *n, int rc)
{
	neigh_changed(n, 0);
	return 0;
}

SEC("tp_btf/neigh_cleanup_and_release")
int BPF_PROG(lfp_neigh_released, struct neighbour *n, int rc)
{
	neigh_changed(n, 1);
	return 0;
}

/* Conntrack entries freed (ct_frees_map.h): the conntrack cache keeps entries' addresses and
 * must not read one whose memory may have gone back to the page allocator. The tracepoint fires
 * at the start of kmem_cache_free(), before the slab has the object back; every object of a
 * cache whose objects are the size of the kernel's struct nf_conn counts (another cache of that
 * size only costs the cache a lookup). It runs on every kmem_cache_free() of the host: the first
 * test is one load and compare. Any namespace's: the cache keeps addresses, not namespaces. */
struct kmem_cache {
	unsigned int object_size;
} __attribute__((preserve_access_index));

struct nf_conn {
	int x;
} __attribute__((preserve_access_index));

static __always_inline void ct_freed(const void *ptr, const struct kmem_cache *s)
{
	__u32 slot;
	__u64 *n;

	if (!s || s->object_size != bpf_core_type_size(struct nf_conn))
		return;
	slot = lfp_ct_free_slot((__u64)ptr);
	n = bpf_map_lookup_elem(&lfp_ct_frees, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* Twice, as two programs: the kernel skips a tracing program that is already running on the CPU
 * (__bpf_trace_run(): a per-program, per-CPU count of runs; a skip is only counted in the
 * program's recursion misses). A free in an interrupt or softirq that comes while one of the
 * two runs for another free on that CPU (in process context, or in the softirq the interrupt
 * interrupted) is still counted by the other, which is not running then: the tracepoint calls
 * them one after the other. Only a free nested two deep, each level inside a different one of
 * the two, would be missed; conntrack entries are not freed in hard interrupts. A free counts
 * once or twice: the data plane asks only whether a count moved. */
SEC("tp_btf/kmem_cache_free")
int BPF_PROG(lfp_ct_freed, unsigned long call_site, const void *ptr, const struct kmem_cache *s)
{
	ct_freed(ptr, s);
	return 0;
}

SEC("tp_btf/kmem_cache_free")
int BPF_PROG(lfp_ct_freed_twin, unsigned long call_site, const void *ptr, const struct kmem_cache *s)
{
	ct_freed(ptr, s);
	return 0;
}
