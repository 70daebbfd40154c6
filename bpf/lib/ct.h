/* Conntrack module: where netfilter tracks connections on the forward path (NAT rules exist),
 * Linux decides every new connection and the fast path takes only the later packets of
 * connections the kernel's own conntrack table holds, looked up with the conntrack kfuncs, and
 * refreshes the entry as nf_conntrack_in() would. Everything that would move the entry's state,
 * or that the entry translates, is Linux's. */
#ifndef LFP_CT_H
#define LFP_CT_H

#include "ctx.h"
#include "parse.h"
#include "linuxfp_types.h"
#include "ct_frees_map.h"

/* The kernel's structures, only the fields read here; CO-RE relocates them against the running
 * kernel's BTF. */
struct ip_ct_tcp_state {
	__u32 td_end;
	__u32 td_maxend;
	__u32 td_maxwin;
	__u32 td_maxack;
	__u8 td_scale;
	__u8 flags;
} __attribute__((preserve_access_index));

struct ip_ct_tcp {
	struct ip_ct_tcp_state seen[2];
	__u8 state;
	__u8 last_dir;
	__u8 retrans;
} __attribute__((preserve_access_index));

union nf_conntrack_proto {
	struct ip_ct_tcp tcp;
} __attribute__((preserve_access_index));

union nf_inet_addr {
	__u32 all[4];
	__be32 ip;
} __attribute__((preserve_access_index));

union nf_conntrack_man_proto {
	__be16 all;
} __attribute__((preserve_access_index));

struct nf_conntrack_man {
	union nf_inet_addr u3;
	union nf_conntrack_man_proto u;
	__u16 l3num;
} __attribute__((preserve_access_index));

struct nf_conntrack_tuple {
	struct nf_conntrack_man src;
	struct {
		union nf_inet_addr u3;
		union {
			__be16 all;
		} u;
		__u8 protonum;
	} dst;
} __attribute__((preserve_access_index));

struct nf_conntrack_tuple_hash {
	struct nf_conntrack_tuple tuple;
} __attribute__((preserve_access_index));

/* The entry's extensions: offset[id] is 0 where the entry has none of that kind. */
struct nf_ct_ext {
	__u8 offset[1];
} __attribute__((preserve_access_index));

enum nf_ct_ext_id {
	NF_CT_EXT_ACCT = 3,
	NF_CT_EXT_TIMEOUT = 6,
};

struct nf_conntrack {
	struct {
		struct {
			int counter;
		} refs;
	} use;
} __attribute__((preserve_access_index));

struct nf_conntrack_zone {
	__u16 id;
} __attribute__((preserve_access_index));

struct lfp_possible_net {
	void *net;
} __attribute__((preserve_access_index));

struct nf_conn {
	struct nf_conntrack ct_general;
	struct nf_conntrack_zone zone;
	struct nf_conntrack_tuple_hash tuplehash[2];
	unsigned long status;
	__u32 timeout;
	struct lfp_possible_net ct_net;
	struct nf_ct_ext *ext;
	union nf_conntrack_proto proto;
} __attribute__((preserve_access_index));

/* struct bpf_ct_opts in its first (12-byte) form: netns, error out, protocol, direction out. */
struct lfp_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};

extern struct nf_conn *bpf_xdp_ct_lookup(struct xdp_md *ctx, struct bpf_sock_tuple *tuple, __u32 tuple__sz,
					 struct lfp_ct_opts *opts, __u32 opts__sz) __ksym;
extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *ctx, struct bpf_sock_tuple *tuple, __u32 tuple__sz,
					 struct lfp_ct_opts *opts, __u32 opts__sz) __ksym;
extern void bpf_ct_release(struct nf_conn *ct) __ksym;
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;
extern int bpf_ct_change_timeout(struct nf_conn *ct, __u32 timeout) __ksym;

/* include/uapi/linux/netfilter/nf_conntrack_common.h */
#define IPS_EXPECTED      (1UL << 0)
#define IPS_SEEN_REPLY    (1UL << 1)
#define IPS_ASSURED       (1UL << 2)
#define IPS_CONFIRMED     (1UL << 3)
#define IPS_SRC_NAT       (1UL << 4)
#define IPS_DST_NAT       (1UL << 5)
#define IPS_SEQ_ADJUST    (1UL << 6)
#define IPS_DYING         (1UL << 9)
#define IPS_FIXED_TIMEOUT (1UL << 10)
#define IPS_TEMPLATE      (1UL << 11)
#define IPS_NAT_CLASH     (1UL << 12) /* also IPS_UNTRACKED */
#define IPS_HELPER        (1UL << 13)
#define IPS_OFFLOAD       (1UL << 14)
#define IPS_HW_OFFLOAD    (1UL << 15)

#define TCP_CONNTRACK_ESTABLISHED 3
#define TCP_CONNTRACK_CLOSE_WAIT  5
#define IP_CT_TCP_FLAG_BE_LIBERAL          0x08

#define TCPHDR_FIN 0x01
#define TCPHDR_SYN 0x02
#define TCPHDR_RST 0x04

#ifndef BPF_F_CURRENT_NETNS
#define BPF_F_CURRENT_NETNS (-1)
#endif

/* Requests to make a TCP connection's tracking liberal (see ct_tcp), at most one per second
 * per connection and direction, and only from its LFP_CT_LIBERAL_AFTER-th segment on that
 * would have been fast-pathed. A short connection (connect, one request, one response, close:
 * two or three such segments each way) is over before it could gain anything from the fast
 * path, while a ctnetlink update per connection costs the controller a CPU's fraction at a few
 * thousand connections per second; its segments stay with Linux, as every segment is until
 * the marking is done. */
#define LFP_CT_LIBERAL_AFTER 4

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lfp_ct_requests SEC(".maps");

struct lfp_ct_asked {
	__u64 last;   /* when the controller was last asked (ns, coarse clock), 0: never */
	__u32 seen;   /* segments seen not liberal (approximate: CPUs race on it, harmlessly) */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lfp_ct_req);
	__type(value, struct lfp_ct_asked);
	__uint(max_entries, 16384);
} lfp_ct_requested SEC(".maps");

/* Frozen per program: the conntrack module is built in for IPv4 / IPv6 (the controller sets them
 * where netfilter tracks that family's connections, so a host without conntrack users loads
 * programs without it, verified in half the time). The runtime flags (lfp_config ct_flags) say
 * whether it runs; a program built without it that finds it must run (the configuration
 * changed, its replacement is being loaded) hands the packet to Linux (LFP_PASS_RELOADING). */
LFP_SETTING(__u32, ct4, 0, "the conntrack module is built in for IPv4");
LFP_SETTING(__u32, ct6, 0, "the conntrack module is built in for IPv6");
LFP_SETTING(__u32, ct_jiffy_ms, 0, "ms per jiffy where the kernel's HZ is known and divides 1000, else 0 (ct_timeout_is)");

/* The packet's connection, as the conntrack lookup and the controller's request see it. */
struct ct_pkt {
	struct bpf_sock_tuple t;
	__u32 tlen;
	__u8 proto;
	__u8 tcp_flags;
	__u8 v6;
	/* Once ct_valid() has read them: the TCP window field as sent (host order), and whether
	 * the segment carries data. */
	__u16 tcp_win;
	__u8 tcp_data;
	/* In: the caller translates (ct_forward may return a translation). Out: nat set when the
	 * connection is translated and the packet leaves with these addresses (IPv4 in [0]) and
	 * ports. */
	__u8 nat_ok;
	__u8 nat;
	/* Out: the state conntrack gives the packet (LFP_CT_STATE_*), when LFP_FORWARDED. */
	__u8 state;
	/* In: defer the timeout refresh (rules before conntrack may drop the packet: Linux would
	 * not refresh then). Out: refresh pending, with timeout (ms), for ct_refresh(). */
	__u8 defer;
	__u8 refresh;
	__u32 timeout;
	/* With refresh: the address of the entry judged, which alone the refresh may move (a
	 * number, not a reference). */
	__u64 judged;
	__be16 nat_sport, nat_dport;
	__be32 nat_saddr[4], nat_daddr[4];
	/* The lookup's options (bpf_ct_opts), here rather than on the stack: the tc program's
	 * deepest calls (its own frame, the filter's filter_classify() and fw_local()) leave the
	 * verifier's 512 bytes no room for more. */
	struct lfp_ct_opts o;
};

/* The conntrack tuple of a TCP or UDP packet (addresses in network byte order, IPv4 in [0]) whose
 * L4 header is in the linear data; c->proto stays 0 for anything else (conntrack tracks ICMP,
 * SCTP ... too: not modelled, Linux's). */
static __always_inline void ct_parse(struct ct_pkt *c, const __u32 *src, const __u32 *dst, int v6, __u8 proto,
				     const void *l4, const void *data_end)
{
	const __u8 *th = l4;
	const __be16 *ports = l4;

	__builtin_memset(c, 0, sizeof(*c));
	c->v6 = v6;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return;
	if ((void *)(th + (proto == IPPROTO_TCP ? 14 : 4)) > data_end)
		return;
	if (proto == IPPROTO_TCP)
		c->tcp_flags = th[13];
	c->proto = proto;
	if (v6) {
		__builtin_memcpy(c->t.ipv6.saddr, src, 16);
		__builtin_memcpy(c->t.ipv6.daddr, dst, 16);
		c->t.ipv6.sport = ports[0];
		c->t.ipv6.dport = ports[1];
		c->tlen = sizeof(c->t.ipv6);
	} else {
		c->t.ipv4.saddr = src[0];
		c->t.ipv4.daddr = dst[0];
		c->t.ipv4.sport = ports[0];
		c->t.ipv4.dport = ports[1];
		c->tlen = sizeof(c->t.ipv4);
	}
}

static __always_inline struct nf_conn *ct_lookup(lfp_ctx *ctx, struct ct_pkt *c)
{
	/* Constant sizes (the verifier checks the tuple's bounds). */
	__u32 tlen = c->v6 ? sizeof(c->t.ipv6) : sizeof(c->t.ipv4);

	__builtin_memset(&c->o, 0, sizeof(c->o));
	c->o.netns_id = BPF_F_CURRENT_NETNS;
	c->o.l4proto = c->proto;
	return ctx_ct_lookup(ctx, &c->t, tlen, &c->o, sizeof(c->o));
}

/* Ask the controller to set IP_CT_TCP_FLAG_BE_LIBERAL on the connection (both directions). */
static __always_inline void ct_request_liberal(const struct ct_pkt *c, __u8 dir)
{
	struct lfp_ct_req r = {};
	__u64 now = bpf_ktime_get_coarse_ns();
	struct lfp_ct_asked *a;

	r.family = c->v6 ? AF_INET6 : AF_INET;
	r.proto = c->proto;
	r.dir = dir;
	if (c->v6) {
		__builtin_memcpy(r.src, c->t.ipv6.saddr, 16);
		__builtin_memcpy(r.dst, c->t.ipv6.daddr, 16);
		r.sport = c->t.ipv6.sport;
		r.dport = c->t.ipv6.dport;
	} else {
		r.src[0] = c->t.ipv4.saddr;
		r.dst[0] = c->t.ipv4.daddr;
		r.sport = c->t.ipv4.sport;
		r.dport = c->t.ipv4.dport;
	}
	a = bpf_map_lookup_elem(&lfp_ct_requested, &r);
	if (!a) {
		struct lfp_ct_asked first = { .seen = 1 };

		bpf_map_update_elem(&lfp_ct_requested, &r, &first, BPF_NOEXIST);
		if (LFP_CT_LIBERAL_AFTER > 1)
			return;
		a = bpf_map_lookup_elem(&lfp_ct_requested, &r);
		if (!a)
			return;
	} else if (a->seen < LFP_CT_LIBERAL_AFTER) {
		a->seen++;
	}
	if (a->seen < LFP_CT_LIBERAL_AFTER || (a->last && now - a->last < 1000000000ULL))
		return;
	a->last = now;
	bpf_ringbuf_output(&lfp_ct_requests, &r, sizeof(r), 0);
}

/* TCP: only segments that leave conntrack's TCP state as it is, and only once the entry is
 * liberal in both directions: Linux no longer sees every segment, so its sequence-window
 * tracking would go stale and judge the connection's later segments (the FIN) out of window,
 * i.e. INVALID. The kernel's own flowtable offload marks its connections liberal for the same
 * reason; linuxfp asks the controller to do the same through ctnetlink (or
 * nf_conntrack_tcp_be_liberal=1 makes every connection so). Until then, Linux.
 *
 * The segments that reach here carry ACK and neither SYN, FIN nor RST (ct_valid()): the ack row
 * of nf_conntrack_proto_tcp.c's tcp_conntracks[dir][TCP_ACK_SET][state]. In either direction it
 * keeps these states as they are:
 *   ESTABLISHED -> ESTABLISHED;
 *   CLOSE_WAIT -> CLOSE_WAIT: one side's FIN was seen and then an ACK; the other side goes on
 *     sending (a client that shut its sending side down after its request: busybox nc, HTTP/1.0
 *     clients, shutdown(SHUT_WR); or a server that did after its response): the whole rest of a
 *     half-closed connection's transfer;
 * and nf_conntrack_tcp_packet()'s switch on the new state has nothing for either (its cases are
 * SYN_SENT, IGNORE, MAX, TIME_WAIT, SYN_SENT2, SYN_RECV and CLOSE), so the segment only goes
 * through tcp_in_window(), which does the same for it in any state (its only state-dependent
 * steps are for SYN and for RST in SYN_SENT): the sender's td_end, td_maxwin, td_maxack and
 * DATA_UNACKNOWLEDGED flag, the receiver's td_maxend and flag, last_win and retrans; liberal
 * entries accept what it would judge out of window. Those updates are what the fast path does
 * not make, in CLOSE_WAIT as in ESTABLISHED, and what the liberal mark is for. Everything else
 * is Linux's: FIN_WAIT (an ACK moves it to CLOSE_WAIT, be it the ACK of the FIN or not),
 * LAST_ACK (to TIME_WAIT), SYN_SENT, SYN_SENT2 (INVALID or ignored), SYN_RECV (the client's ACK
 * completes the handshake; the server's keeps it unless it ends a simultaneous open); TIME_WAIT
 * and CLOSE keep their state too, but after both FINs or a RST only stray retransmissions come:
 * not worth a case.
 *
 * Returns the timeout Linux's nf_conntrack_tcp_packet() would give the entry, in ms, or 0:
 * timeouts[state], or shorter: the retransmission timeout after tcp_max_retrans retransmissions
 * (the entry's count: Linux resets it on the next segment it sees that is not one), the
 * unacknowledged one while data is unacknowledged, the retransmission one when the segment
 * closes the window (tcp_in_window() keeps its window as last_win); then, for an ESTABLISHED
 * entry that has seen no reply (picked up mid-stream), at most the unacknowledged timeout.
 *
 * Unacknowledged data is judged from the segment, not from the entry's
 * IP_CT_TCP_FLAG_DATA_UNACKNOWLEDGED flags: those say what the last segment Linux saw left
 * (tcp_in_window() sets the sender's on new data and clears the receiver's on an ACK of all of
 * its data), and stay so while the fast path takes the rest. A connection whose last segment seen
 * by Linux was data would be refreshed to the unacknowledged timeout (300 s) for ever after, and
 * once idle expire there, where Linux alone, having seen the final ACK, keeps it for the state's
 * timeout (5 days; kube-proxy's close_wait, 1 hour): a translated connection would lose its
 * mapping. A segment with data sets its sender's flag, so Linux's choice for it is exact; a pure
 * ACK is taken as acknowledging all the peer's data, as the last segment of an exchange does
 * (the one that decides when an idle connection's entry expires). Where a pure ACK leaves data
 * unacknowledged in the middle of a transfer, the entry gets the state's timeout where Linux's
 * would be shorter, until the next data segment. */
static __always_inline __u32 ct_tcp(const struct lfp_config *cfg, const struct nf_conn *ct, const struct ct_pkt *c,
				    __u8 dir, unsigned long status, enum lfp_reason *why)
{
	__u32 timeout, state;
	__u8 f0, f1;

	switch (ct->proto.tcp.state) {
	case TCP_CONNTRACK_ESTABLISHED:
		state = cfg->ct_tcp_established_ms;
		break;
	case TCP_CONNTRACK_CLOSE_WAIT:
		state = cfg->ct_tcp_close_wait_ms;
		break;
	default:
		*why = LFP_PASS_CT_STATE;
		return 0;
	}
	f0 = ct->proto.tcp.seen[0].flags;
	f1 = ct->proto.tcp.seen[1].flags;
	if (!(cfg->ct_flags & LFP_CT_TCP_LIBERAL) && !(f0 & f1 & IP_CT_TCP_FLAG_BE_LIBERAL)) {
		ct_request_liberal(c, dir);
		*why = LFP_PASS_CT_LIBERAL;
		return 0;
	}
	timeout = state;
	if (ct->proto.tcp.retrans >= cfg->ct_tcp_max_retrans && state > cfg->ct_tcp_retrans_ms)
		timeout = cfg->ct_tcp_retrans_ms;
	else if (c->tcp_data && state > cfg->ct_tcp_unack_ms)
		timeout = cfg->ct_tcp_unack_ms;
	else if (c->tcp_win == 0 && state > cfg->ct_tcp_retrans_ms)
		timeout = cfg->ct_tcp_retrans_ms;
	if (!(status & IPS_SEEN_REPLY) && ct->proto.tcp.state == TCP_CONNTRACK_ESTABLISHED &&
	    timeout > cfg->ct_tcp_unack_ms)
		timeout = cfg->ct_tcp_unack_ms;
	return timeout;
}

#define TCPHDR_ACK 0x10
#define TCPHDR_URG 0x20

/* nf_checksum() done here: does the TCP/UDP checksum of the packet's L4 part (l4len bytes at l4,
 * l4off from the frame's start) verify? 1 yes, 0 no, -1 cannot tell (too long, unreadable).
 * The sum starts with the pseudo header (RFC 793/768, RFC 8200 8.1). */
static __always_inline __u32 ct_csum_pseudo(const struct ct_pkt *c, __u32 l4len)
{
	__u32 sum = 0;

	if (c->v6) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			sum = csum_add(sum, c->t.ipv6.saddr[i]);
			sum = csum_add(sum, c->t.ipv6.daddr[i]);
		}
		sum = csum_add(sum, bpf_htonl(l4len));
		sum = csum_add(sum, bpf_htonl(c->proto));
	} else {
		sum = csum_add(sum, c->t.ipv4.saddr);
		sum = csum_add(sum, c->t.ipv4.daddr);
		sum = csum_add(sum, bpf_htons(c->proto));
		sum = csum_add(sum, bpf_htons(l4len));
	}
	return sum;
}

/* An L4 part shorter than this that lies in the packet's linear part (always at XDP) is summed
 * in place, 32 bits at a time: a datagram or segment of a request/response flow, an ACK, the
 * benchmarks' small frames. Longer ones are read through the load helper in 256-byte chunks into
 * buf (scratch, 260 bytes) and summed by bpf_csum_diff(): two helper calls per chunk, which on
 * a CPU that mispredicts every return cost more than summing a few words here. */
#define CT_CSUM_INLINE 64
#define CT_CSUM_CHUNK  256
#define CT_CSUM_CHUNKS 6

static __always_inline int ct_l4_csum(lfp_ctx *ctx, const struct ct_pkt *c, const __u8 *l4, const void *data_end,
				      __u32 l4len, __u8 *buf)
{
	__u32 sum = ct_csum_pseudo(c, l4len), l4off = (__u32)((void *)l4 - ctx_data(ctx));

	if (l4len < CT_CSUM_INLINE && (void *)l4 + l4len <= data_end) {
		/* A one's complement sum of 32-bit words in a 64-bit register: the carries are
		 * added back at the end (as ipv4_csum_bad() does). */
		__u64 s = sum;
		__u32 rem = l4len & 3;

#pragma unroll
		for (int i = 0; i < CT_CSUM_INLINE / 4; i++) {
			if (i * 4 + 4 > l4len)
				break;
			if ((void *)(l4 + i * 4 + 4) > data_end)
				return -1;
			s += *(const __u32 *)(l4 + i * 4);
		}
		if (rem) {
			/* The last 1-3 bytes as the word they begin, padded with zeroes, as loaded
			 * from memory on this little-endian target (bpf_csum_diff()'s view of a
			 * zero-padded buffer). */
			const __u8 *q = l4 + (l4len & (CT_CSUM_INLINE - 4));
			__u32 w;

			if ((void *)(q + 1) > data_end)
				return -1;
			w = q[0];
			if (rem > 1) {
				if ((void *)(q + 2) > data_end)
					return -1;
				w |= (__u32)q[1] << 8;
			}
			if (rem > 2) {
				if ((void *)(q + 3) > data_end)
					return -1;
				w |= (__u32)q[2] << 16;
			}
			s += w;
		}
		s = (s & 0xffffffff) + (s >> 32);
		s = (s & 0xffffffff) + (s >> 32);
		return csum_fold((__u32)s) == 0;
	}
	if (l4len > CT_CSUM_CHUNK * CT_CSUM_CHUNKS)
		return -1;
#pragma unroll
	for (int i = 0; i < CT_CSUM_CHUNKS; i++) {
		__u32 off = i * CT_CSUM_CHUNK, n, n4;
		long r;

		if (off >= l4len)
			break;
		n = l4len - off;
		if (n > CT_CSUM_CHUNK)
			n = CT_CSUM_CHUNK;
		n = ((n - 1) & (CT_CSUM_CHUNK - 1)) + 1; /* 1..256, as the verifier can see */
		n4 = (n + 3) & ~3U;
		/* Zero the word the last bytes share with padding, then load over it. */
		*(__u32 *)(buf + ((n & ~3U) & 0x1fc)) = 0;
		if (ctx_load_bytes(ctx, l4off + off, buf, n))
			return -1;
		r = bpf_csum_diff(0, 0, (__be32 *)buf, n4, sum);
		if (r < 0)
			return -1;
		sum = (__u32)r;
	}
	return csum_fold(sum) == 0;
}

/* What conntrack's error handlers (tcp_error(), udp_error()) would find wrong with the packet
 * before looking its connection up: such a packet is INVALID for Linux (not tracked: no
 * timeout refresh, no NAT, ctstate INVALID), so it is Linux's. l4len: the packet's L4 length
 * (IP length minus headers). The checksum is verified by Linux only with
 * nf_conntrack_checksum=1 (LFP_CT_CHECKSUM), and only where the skb's state does not vouch
 * for it already (CHECKSUM_UNNECESSARY, or PARTIAL: still to be filled in); then here too. */
static __always_inline enum lfp_reason ct_valid(lfp_ctx *ctx, const struct lfp_config *cfg, struct ct_pkt *c,
						const void *l4, const void *data_end, __u32 l4len, __u8 *buf)
{
	int csum = 0;

	if (c->proto == IPPROTO_TCP) {
		const __u8 *th = l4;

		if ((void *)(th + 20) > data_end)
			return LFP_PASS_CT_INVALID;
		/* A header length below 20 or beyond the packet. */
		if ((th[12] >> 4) < 5 || (__u32)(th[12] >> 4) * 4 > l4len)
			return LFP_PASS_CT_INVALID;
		/* SYN, FIN, RST move the state machine: Linux's, valid or not. */
		if (c->tcp_flags & (TCPHDR_SYN | TCPHDR_FIN | TCPHDR_RST))
			return LFP_PASS_CT_STATE;
		c->tcp_win = (__u16)th[14] << 8 | th[15];
		c->tcp_data = l4len > (__u32)(th[12] >> 4) * 4;
		/* tcp_valid_flags[] (PSH, ECE, CWR aside): without those three, only ACK and ACK|URG. */
		if ((c->tcp_flags & 0x37) != TCPHDR_ACK && (c->tcp_flags & 0x37) != (TCPHDR_ACK | TCPHDR_URG))
			return LFP_PASS_CT_INVALID;
		csum = 1;
	} else if (c->proto == IPPROTO_UDP) {
		const __be16 *uh = l4;
		__u32 ulen;

		if ((void *)(uh + 4) > data_end)
			return LFP_PASS_CT_INVALID;
		ulen = bpf_ntohs(uh[2]);
		if (ulen < 8 || ulen > l4len)
			return LFP_PASS_CT_INVALID;
		csum = uh[3] != 0;
	}
	if (csum && (cfg->ct_flags & LFP_CT_CHECKSUM)) {
		struct ctx_csum cs;

		ctx_csum_state(ctx, &cs);
		if (cs.ip_summed != CTX_CSUM_UNNECESSARY && cs.ip_summed != CTX_CSUM_PARTIAL) {
			int ok = ct_l4_csum(ctx, c, l4, data_end, l4len, buf);

			if (ok < 0)
				return LFP_PASS_CT_CHECKSUM;
			if (!ok)
				return LFP_PASS_CT_INVALID;
		}
	}
	return LFP_FORWARDED;
}

/* The conntrack step, where nf_conntrack_in() runs (prerouting, before routing and the filter):
 * LFP_FORWARDED when the connection is established in the kernel's table, untranslated and in a
 * state the fast path keeps exactly as Linux would (its timeout is then refreshed, as Linux does
 * for every packet it tracks, whatever happens to it next); otherwise why Linux must see it. */
/* Extensions that make every packet of a connection Linux's: accounting (nf_conntrack_acct, or
 * a connbytes match, which turns it on) counts each packet and its bytes in the entry, and the
 * fast path cannot add to those counters; a timeout policy (nft `ct timeout set`, iptables `CT
 * --timeout`) gives the entry timeouts other than the sysctls the refresh uses. The ids are the
 * running kernel's (they depend on its configuration); reading a missing ext (NULL) yields 0. */
static __always_inline enum lfp_reason ct_extensions(const struct nf_conn *ct)
{
	/* Plain loads through a read-only view of the entry (bpf_rdonly_cast(), which the
	 * verifier turns into a register move), instead of a bpf_probe_read_kernel() call for the
	 * pointer and one for the offsets (~35 ns each per packet on a CPU that mispredicts every
	 * return). Not through the entry's own pointer: a pointer loaded from a trusted object is
	 * checked against the kernel's trusted-type lists at every path the verifier walks, which
	 * made the programs take four times as long to verify. A load that faults yields 0; it
	 * cannot here, as the entry is held and confirmed, so its extensions stay put. No
	 * extension at all: nothing to check. The ids this kernel numbers beyond the first eight
	 * offsets are taken as present. */
	const struct nf_conn *ro = bpf_rdonly_cast(ct, bpf_core_type_id_kernel(struct nf_conn));
	const struct nf_ct_ext *ext = ro->ext;
	const __u8 *offset;

	if (!ext)
		return LFP_FORWARDED;
	offset = ext->offset;
	if (bpf_core_enum_value_exists(enum nf_ct_ext_id, NF_CT_EXT_ACCT)) {
		__u32 id = bpf_core_enum_value(enum nf_ct_ext_id, NF_CT_EXT_ACCT);

		if (id >= 8 || offset[id & 7])
			return LFP_PASS_CT_ACCT;
	}
	if (bpf_core_enum_value_exists(enum nf_ct_ext_id, NF_CT_EXT_TIMEOUT)) {
		__u32 id = bpf_core_enum_value(enum nf_ct_ext_id, NF_CT_EXT_TIMEOUT);
		void *policy = 0;
		__u8 off;

		if (id >= 8)
			return LFP_PASS_CT_TIMEOUT;
		off = offset[id & 7];
		if (!off)
			return LFP_FORWARDED;
		/* struct nf_conn_timeout: the policy, or NULL once its object was deleted
		 * (nf_ct_untimeout()); then the sysctls time the entry again. At a run-time offset
		 * into the extensions: read with the helper. */
		if (bpf_probe_read_kernel(&policy, sizeof(policy), (void *)ext + off) || policy)
			return LFP_PASS_CT_TIMEOUT;
	}
	return LFP_FORWARDED;
}

/* msecs_to_jiffies() where HZ divides 1000: ms rounded up to whole jiffies of jms ms. The ms per
 * jiffy is a frozen setting (a host's HZ never changes): the verifier keeps only its own case,
 * and HZ 1000 and 250 divide by a constant power of two, a shift, where a division by a run-time
 * value costs tens of cycles at every conntrack lookup. */
static __always_inline __u32 ct_ms_to_jiffies(__u32 ms)
{
	switch (cfg_ct_jiffy_ms) {
	case 1:
		return ms;
	case 4:
		return (ms + 3) / 4;
	}
	return (ms + cfg_ct_jiffy_ms - 1) / cfg_ct_jiffy_ms;
}

/* The conntrack cache: where each CPU last found a packet's entry. Per packet the kernel's
 * lookup (bpf_*_ct_lookup: the tuple hashed with siphash, the bucket walked, the entry's reference
 * count raised, and lowered again by bpf_ct_release(), an atomic write to a line every CPU
 * forwarding the connection shares) is, on a CPU that mispredicts every return, some 150 ns:
 * four of them a third of a pod-to-pod packet's program time. A place holds the address of the
 * entry the last lookup of a tuple hashing to it found, as a number, not a reference. The entry
 * is read through a read-only view (bpf_rdonly_cast(), whose loads cannot fault), and only while
 * it is still what the kernel's lookup would find for the packet (ct_cached() before its fields
 * are read; its count of frees again after: ct_forward).
 *
 * The kernel allocates entries from a SLAB_TYPESAFE_BY_RCU cache: within one program run, memory
 * that held an entry holds an entry (another one, maybe), but across runs the slab's page may
 * have gone back to the page allocator and hold anything, even bytes a local user chose. So a
 * kept address is used only while no object at it was freed since the lookup that found it
 * (ct_frees_map.h: the watcher sees every free of an object of the entries' size before the slab
 * has it back; the controller turns the cache on only where that watcher runs, LFP_CT_CACHE).
 * Then the checks are those of ____nf_conntrack_find() and __nf_conntrack_find_get(): the tuple
 * of the direction the place names equal to the packet's, the entry confirmed (a recycled one is
 * not until it is in the table again) and not dying, its reference count not zero, the default
 * zone, the namespace the lookup found it in, and not expired. Nothing is written through the
 * view: where the entry's timeout must move, it is looked up as before (ct_forward). Per CPU, as
 * the FIB cache's sets (fibcache.h), in one array with a range per CPU that the controller
 * sizes. */
#define LFP_CT_CACHE_SHIFT 9

struct lfp_ct_place {
	__u64 ct;    /* the entry's address, 0: none */
	__u64 net;   /* its namespace's (struct net) */
	__u64 freed; /* its slot's count of frees (lfp_ct_frees) while the lookup held it */
	__u32 dir;   /* the direction of its tuple the packet's was */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_ct_place);
	__uint(max_entries, 1 << LFP_CT_CACHE_SHIFT); /* times the possible CPUs: dataplane.New */
	/* Each place in half a cache line, none across two (mappable: fibcache.h says why). */
	__uint(map_flags, BPF_F_MMAPABLE);
} lfp_ct_cache SEC(".maps");

/* This CPU's place for the packet's tuple (each word mixed by a multiplication, as
 * fib_cache_set_of() does), or NULL beyond the array's end. */
static __always_inline struct lfp_ct_place *ct_cache_place(const struct ct_pkt *c)
{
	const __u32 *w = (const __u32 *)&c->t;
	__u32 h = (c->proto ^ w[0]) * 0x9e3779b1u, key;

	h = (h ^ w[1]) * 0x85ebca6bu;
	h = (h ^ w[2]) * 0xc2b2ae35u;
	if (c->v6) {
#pragma unroll
		for (int i = 3; i < 9; i++)
			h = (h ^ w[i]) * 0x9e3779b1u;
	}
	key = bpf_get_smp_processor_id() << LFP_CT_CACHE_SHIFT | h >> (32 - LFP_CT_CACHE_SHIFT);
	return bpf_map_lookup_elem(&lfp_ct_cache, &key);
}

/* Whether tuple t is the packet's: addresses, ports, protocol and family, as nf_ct_tuple_equal()
 * compares them (an IPv4 address's other words are zero in both). Each load through the read-only
 * view is checked by the JIT for a kernel address (BPF_PROBE_MEM: several instructions and a
 * branch), so an address is read as two 64-bit words (the verifier allows no load across the
 * end of a member, so the ports, family and protocol are read one by one). */
static __always_inline int ct_tuple_is(const struct nf_conntrack_tuple *t, const struct ct_pkt *c)
{
	const __u64 *s3 = (const __u64 *)&t->src.u3, *d3 = (const __u64 *)&t->dst.u3;
	__u64 a;

	if (c->v6) {
		const __u64 *s = (const __u64 *)c->t.ipv6.saddr, *d = (const __u64 *)c->t.ipv6.daddr;

		a = (s3[0] ^ s[0]) | (s3[1] ^ s[1]) | (d3[0] ^ d[0]) | (d3[1] ^ d[1]) |
		    (t->src.u.all ^ c->t.ipv6.sport) | (t->dst.u.all ^ c->t.ipv6.dport) | (t->src.l3num ^ AF_INET6);
	} else {
		a = (s3[0] ^ c->t.ipv4.saddr) | s3[1] | (d3[0] ^ c->t.ipv4.daddr) | d3[1] |
		    (t->src.u.all ^ c->t.ipv4.sport) | (t->dst.u.all ^ c->t.ipv4.dport) | (t->src.l3num ^ AF_INET);
	}
	return (a | (t->dst.protonum ^ c->proto)) == 0;
}

/* The count of frees (ct_frees_map.h) of the slot of address addr, or NULL. */
static __always_inline const volatile __u64 *ct_frees_of(__u64 addr)
{
	__u32 slot = lfp_ct_free_slot(addr);

	return bpf_map_lookup_elem(&lfp_ct_frees, &slot);
}

/* Whether no object at place pl's address was freed since its lookup held it: its slot's count
 * of frees is still the one the place keeps. */
static __always_inline int ct_unfreed(const struct lfp_ct_place *pl)
{
	const volatile __u64 *freed = ct_frees_of(pl->ct);

	return freed && *freed == pl->freed;
}

/* The entry place pl names, read-only, if it is the one the kernel's lookup would find for the
 * packet now (see the cache above), with c->o.dir set; otherwise NULL. */
static __always_inline const struct nf_conn *ct_cached(const struct lfp_ct_place *pl, struct ct_pkt *c)
{
	const struct nf_conn *ro;
	const struct nf_conntrack_tuple *t;

	if (!pl || !pl->ct || !ct_unfreed(pl))
		return NULL;
	ro = bpf_rdonly_cast((void *)pl->ct, bpf_core_type_id_kernel(struct nf_conn));
	t = pl->dir ? &ro->tuplehash[1].tuple : &ro->tuplehash[0].tuple;
	if (!ct_tuple_is(t, c))
		return NULL;
	if ((ro->status & (IPS_CONFIRMED | IPS_DYING)) != IPS_CONFIRMED || !ro->ct_general.use.refs.counter ||
	    (__u64)ro->ct_net.net != pl->net)
		return NULL;
	if (bpf_core_field_exists(ro->zone) && ro->zone.id)
		return NULL;
	/* nf_ct_is_expired(): the caller asks for a timeout still ahead of now as well. */
	if ((__s32)(ro->timeout - (__u32)bpf_jiffies64()) <= 0)
		return NULL;
	c->o.dir = pl->dir;
	return ro;
}

/* Whether the entry's timeout is what refreshing it to timeout ms from now writes: nf_ct_refresh()
 * and bpf_ct_change_timeout() write jiffies + msecs_to_jiffies(timeout) into ct->timeout, and
 * nf_ct_refresh() only a different value. The packets of a busy connection mostly come within one
 * jiffy of each other, when that value is there already: nothing to write then, no call. Where
 * the ms per jiffy is not known, always a write. */
static __always_inline int ct_timeout_is(const struct nf_conn *ro, __u32 timeout)
{
	return cfg_ct_jiffy_ms && ro->timeout == (__u32)bpf_jiffies64() + ct_ms_to_jiffies(timeout);
}

/* What the entry ro (read-only: the cache's, or a held one's view) means for the packet: c->state,
 * c->nat and its addresses, the timeout Linux's refresh gives it (ms) in *timeout; LFP_FORWARDED
 * or why Linux must see the packet. */
static __always_inline enum lfp_reason ct_judge(const struct lfp_config *cfg, struct ct_pkt *c,
						const struct nf_conn *ro, __u32 *timeout, int held)
{
	enum lfp_reason why = LFP_FORWARDED;
	unsigned long status = ro->status;

	*timeout = 0;
	c->nat = 0;
	/* resolve_normal_ct(): a reply, or a packet of a connection that has seen one, is
	 * ESTABLISHED; before that NEW (EXPECTED, RELATED, goes to Linux below). */
	c->state = (c->o.dir || (status & IPS_SEEN_REPLY)) ? LFP_CT_STATE_ESTABLISHED : LFP_CT_STATE_NEW;
	if ((status & (IPS_SRC_NAT | IPS_DST_NAT)) &&
	    !(c->nat_ok && (cfg->ct_flags & (c->v6 ? LFP_CT_NAT6 : LFP_CT_NAT4)))) {
		/* Translated, where the fast path does not translate (rules on prerouting or
		 * postrouting that see the packet before or after): Linux's. */
		return LFP_PASS_CT_NAT;
	}
	if (!(status & IPS_CONFIRMED) ||
	    (status & (IPS_EXPECTED | IPS_SEQ_ADJUST | IPS_DYING | IPS_TEMPLATE | IPS_NAT_CLASH | IPS_HELPER |
		       IPS_OFFLOAD | IPS_HW_OFFLOAD))) {
		/* Unconfirmed, a helper's (expected, sequence adjusting), dying, offloaded ...: Linux. */
		return LFP_PASS_CT_STATE;
	}
	/* Counted, or timed by a policy of its own: Linux's. Asked of a held entry only: a place
	 * of the cache is filled only with an entry judged LFP_FORWARDED, and while its count of
	 * frees says it is the same entry, it cannot have gained either since: the accounting
	 * extension is added when an entry is created, a timeout policy from the template it is
	 * created with (nft's `ct timeout set` leaves confirmed entries alone), and a policy can
	 * only be dropped (nf_ct_untimeout()). (nf_ct_ext_add() itself only warns.) Nor is the
	 * extensions' memory read without a reference: nf_conntrack_free() frees it before the
	 * entry. */
	if (held) {
		why = ct_extensions(ro);
		if (why != LFP_FORWARDED)
			return why;
	}
	if (c->proto == IPPROTO_TCP) {
		*timeout = ct_tcp(cfg, ro, c, c->o.dir, status, &why);
	} else if (status & IPS_ASSURED) {
		/* udp_packet(): once ASSURED (replies seen, still alive after 2 s) every packet
		 * refreshes the entry to the stream timeout. */
		*timeout = cfg->ct_udp_stream_ms;
	} else if (!(status & IPS_SEEN_REPLY) && c->o.dir == 0) {
		/* Before any reply, a packet in the original direction refreshes it to the unreplied
		 * timeout (one-way flows: a vxlan device's outer packets, for one). */
		*timeout = cfg->ct_udp_ms;
	} else {
		/* A first reply, or a stream not yet ASSURED: the state moves: Linux's. */
		return LFP_PASS_CT_STATE;
	}
	if (why == LFP_FORWARDED && (status & (IPS_SRC_NAT | IPS_DST_NAT))) {
		/* nf_nat_manip_pkt() in both hooks together: the packet leaves with the inverse of the
		 * other direction's tuple (nf_ct_invert_tuple()); a part that is not translated comes
		 * out as it was. */
		/* Constant indices: CO-RE relocates each (the kernel's tuplehash entry is larger than
		 * the one declared here). */
		const struct nf_conntrack_tuple *other = c->o.dir ? &ro->tuplehash[0].tuple : &ro->tuplehash[1].tuple;

		if (c->v6) {
#pragma unroll
			for (int i = 0; i < 4; i++) {
				c->nat_saddr[i] = other->dst.u3.all[i];
				c->nat_daddr[i] = other->src.u3.all[i];
			}
		} else {
			c->nat_saddr[0] = other->dst.u3.ip;
			c->nat_daddr[0] = other->src.u3.ip;
		}
		c->nat_sport = other->dst.u.all;
		c->nat_dport = other->src.u.all;
		c->nat = 1;
	}
	return why;
}

/* The packet's entry judged (ct_judge) and refreshed as Linux would: from the conntrack cache
 * where it holds the entry and the refresh would write nothing (or nothing now: deferred), else
 * through the kernel's lookup, whose entry the cache then keeps. A global function, verified once
 * on its own: inlined at each of its callers (the bridge's netfilter step, the router, the VXLAN
 * module's outer packet), its two ways (the cache's entry, the lookup's held one) multiplied the
 * states of everything after them (the XDP bridge port with the router: 447k -> 779k verified
 * instructions). Returns an enum lfp_reason. */
__attribute__((noinline)) int ct_forward(lfp_ctx *ctx, const struct lfp_config *cfg, struct ct_pkt *c)
{
	struct lfp_ct_place *pl;
	const struct nf_conn *ro;
	struct nf_conn *ct;
	enum lfp_reason why;
	__u32 timeout;

	if (!ctx || !cfg || !c)
		return LFP_PASS_CT_PROTO;
	if (!c->proto)
		return LFP_PASS_CT_PROTO;
	/* These move the TCP state machine: Linux's. */
	if (c->tcp_flags & (TCPHDR_SYN | TCPHDR_FIN | TCPHDR_RST))
		return LFP_PASS_CT_STATE;
	/* The cache is on only where the frees are seen (LFP_CT_CACHE). */
	pl = (cfg->ct_flags & LFP_CT_CACHE) ? ct_cache_place(c) : NULL;
	ro = ct_cached(pl, c);
	if (ro) {
		int done;

		why = ct_judge(cfg, c, ro, &timeout, 0);
		done = why != LFP_FORWARDED || (ro->status & IPS_FIXED_TIMEOUT) || ct_timeout_is(ro, timeout);
		/* Read without a reference: the entry may have been freed meanwhile and its memory
		 * taken by another connection's (see the cache above). What was read holds only if
		 * it was still the entry after it, as __nf_conntrack_find_get() checks the tuple
		 * again once it holds the entry: its count of frees still the one the place keeps.
		 * A free counts before the slab has the object back, so memory taken by another
		 * entry by the time of a read above (seen there) moved the count before that (seen
		 * here: loads are not reordered on this architecture). Then the tuple, zone and
		 * namespace are the ones ct_cached() saw; its other checks are the lookup's own,
		 * which stand for the moment of the lookup too. */
		if (ct_unfreed(pl)) {
			if (done)
				return why;
			/* Refreshed after the filter (ct_refresh() looks the entry up then). */
			if (c->defer) {
				c->timeout = timeout;
				c->judged = pl->ct;
				c->refresh = 1;
				return why;
			}
		}
	}
	ct = ct_lookup(ctx, c);
	/* No entry: a new connection (or one conntrack gave up): Linux creates the entry, applies
	 * the nat chains and decides. */
	if (!ct)
		return LFP_PASS_CT_NEW;
	ro = bpf_rdonly_cast(ct, bpf_core_type_id_kernel(struct nf_conn));
	why = ct_judge(cfg, c, ro, &timeout, 1);
	if (why == LFP_FORWARDED) {
		if (!(ro->status & IPS_FIXED_TIMEOUT) && !ct_timeout_is(ro, timeout)) {
			if (c->defer) {
				c->timeout = timeout;
				c->judged = (__u64)ct;
				c->refresh = 1;
			} else {
				bpf_ct_change_timeout(ct, timeout);
			}
		}
		if (pl) {
			const volatile __u64 *freed;

			/* The address read back from the map, a number there (the verifier allows
			 * no multiplication of a pointer). The count is read while the entry is
			 * held: it cannot be freed before the release, so any free of it moves the
			 * count past this one. */
			pl->ct = (__u64)ct;
			freed = ct_frees_of(*(volatile __u64 *)&pl->ct);
			if (freed) {
				pl->net = (__u64)ro->ct_net.net;
				pl->freed = *freed;
				pl->dir = c->o.dir;
			} else {
				pl->ct = 0;
			}
		}
	}
	bpf_ct_release(ct);
	return why;
}

/* The conntrack step of a forwarded or bridged packet (src, dst: its addresses; l4: its L4
 * header, l4len bytes of it in the packet; buf: ct_l4_csum()'s scratch): c is parsed, validated
 * as conntrack's error handlers would, then looked up (ct_forward). The caller translates the
 * connections the fast path may translate (nat_ok: it can); rules before conntrack that may drop
 * the packet defer the timeout refresh. */
static __always_inline enum lfp_reason ct_prerouting(lfp_ctx *ctx, const struct lfp_config *cfg, struct ct_pkt *c,
						     const __u32 *src, const __u32 *dst, int v6, __u8 proto,
						     const void *l4, const void *data_end, __u32 l4len, __u8 *buf,
						     int nat_ok)
{
	enum lfp_reason r;

	ct_parse(c, src, dst, v6, proto, l4, data_end);
	c->defer = !!(cfg->fw_flags & (v6 ? LFP_FW_PRE_CT_DROP6 : LFP_FW_PRE_CT_DROP4));
	c->nat_ok = nat_ok;
	r = ct_valid(ctx, cfg, c, l4, data_end, l4len, buf);
	if (r == LFP_FORWARDED)
		r = ct_forward(ctx, cfg, c);
	return r;
}

/* The deferred refresh (c->defer), once the filter has classified the packet: verdict says
 * whether Linux's conntrack would have seen it. Not for a packet a rule before conntrack
 * dropped (nf_conntrack_in() never ran), nor for one going to Linux (which refreshes it
 * itself, or not, as its rules say). */
static __always_inline void ct_refresh(lfp_ctx *ctx, struct ct_pkt *c, __u32 verdict)
{
	struct nf_conn *ct;

	/* Built without the conntrack module for the family: nothing can be pending (and the
	 * verifier drops the rest). */
	if (!(c->v6 ? cfg_ct6 : cfg_ct4) || !c->refresh)
		return;
	c->refresh = 0;
	if ((verdict & LFP_FW_PRE_CT) || (verdict & 3) == LFP_FW_LINUX)
		return;
	ct = ct_lookup(ctx, c);
	if (!ct)
		return;
	/* Another entry of the tuple (the one judged was deleted and the tuple's connection made
	 * anew meanwhile) gets nothing: the timeout was the judged entry's. */
	if ((__u64)ct == c->judged)
		bpf_ct_change_timeout(ct, c->timeout);
	bpf_ct_release(ct);
}

#endif
