/* Bridge module, data side: the mirror of Linux's bridge forwarding databases (FDB) and bridge
 * ports, and the part of br_forward() that both bridged frames and routed packets leaving
 * through a bridge go through. Linux stays the authority: it learns, ages and flushes; the
 * controller copies every change it reports (AF_BRIDGE neighbour and link events) into these
 * maps. */
#ifndef LFP_FDB_H
#define LFP_FDB_H

#include "ctx.h"
#include "parse.h"
#include "stats.h"
#include "gate.h"
#include "iface.h"

#include "fdb_map.h"

/* The FDB mirror: each bridge's VLAN 0 entries. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lfp_fdb_key);
	__type(value, struct lfp_fdb_val);
	__uint(max_entries, 131072);
} lfp_fdb SEC(".maps");

/* Bridges and bridge ports, by ifindex, as lfp_ifs and lfp_ifs_hi hold interfaces (iface.h): a
 * bridged frame looks up its ingress and egress ports, and an array's lookup is inlined where a
 * hash lookup is a call. An entry whose bridge is 0 is none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_l2_dev);
	__uint(max_entries, LFP_IFS_DIRECT);
} lfp_l2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lfp_l2_dev);
	__uint(max_entries, 4096);
} lfp_l2_hi SEC(".maps");

/* Out of line for the same reason as lfp_iface_hi(). */
static __attribute__((noinline)) struct lfp_l2_dev *l2_dev_hi(__u32 ifindex)
{
	return bpf_map_lookup_elem(&lfp_l2_hi, &ifindex);
}

/* How often, at most, one FDB entry is refreshed, in jiffies (set by the controller from the kernel's
 * HZ; see fdb_refresh_due). */
LFP_SETTING(__u64, fdb_refresh_jiffies, 100, "the least time between two refreshes of one FDB entry (jiffies)");

/* The mirror's entry for mac on bridge, or NULL: none, or one the bridge may have moved or
 * deleted since the controller read it (include/fdb_map.h); Linux knows where it is. The entry
 * names its bucket of moves: the controller wrote it with the key, as fdb_bucket() of that key
 * (dataplane.fdbBucket, the function the watcher counts moves with), and nothing else writes it,
 * so the count read is the one of (bridge, mac)'s bucket, without hashing the MAC again. The
 * hash map holds every entry; fdb_get() reads most of them from lfp_fdb_slots instead. */
static __always_inline struct lfp_fdb_val *fdb_lookup(__u32 bridge, const __u8 *mac)
{
	struct lfp_fdb_key k = {};
	struct lfp_fdb_val *v;

	k.bridge = bridge;
	__builtin_memcpy(k.mac, mac, ETH_ALEN);
	v = bpf_map_lookup_elem(&lfp_fdb, &k);
	if (v && v->moved != fdb_moves(v->bucket))
		return NULL;
	return v;
}

/* The mirror's entries again, direct-mapped: (bridge, mac)'s entry is in slot fdb_slot_of()
 * unless the controller gave that slot to another entry, which then holds its own key there
 * (dataplane.syncSlots). A bridged frame looks up two MACs; reading a slot is inlined,
 * where a hash map lookup is a call that hashes and compares the key in the kernel (on CPUs whose
 * kernel returns through a safe-RET thunk, AMD with SRSO, each return is mispredicted): the two
 * hash lookups and their returns were about a third of a bridged frame's program time. The
 * controller writes a slot in place (BPF_F_MMAPABLE), word by word, with a new generation in
 * each word (struct lfp_fdb_slot): a slot whose words do not all have the same generation is
 * being written, and the frame looks in the hash map, which is written before it. */
#define LFP_FDB_SLOT_BITS 16
#define LFP_FDB_SLOTS (1 << LFP_FDB_SLOT_BITS)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_fdb_slot);
	__uint(max_entries, LFP_FDB_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
} lfp_fdb_slots SEC(".maps");

/* lfp_fdb_slot.moved keeps the low 48 bits of a count: equal there and not in full, the count
 * would have grown by 2^48 since the controller read it. */
#define LFP_FDB_MOVED_MASK ((1ULL << 48) - 1)

/* What the fast path uses of one FDB entry (fdb_get). Scalars only: a pointer into the slot or
 * into the hash map's entry, kept beside them, would be of two map types after the lookup, and
 * the verifier would walk the rest of the bridge program once for each. */
struct fdb_ent {
	__u32 port;
	__u16 flags; /* enum lfp_fdb_flags */
	__u8 refresh; /* the frame is this entry's refresh (fdb_refresh_due), when asked for */
	__u8 pad;
};

static __always_inline __u64 fdb_mac48(const __u8 *mac)
{
	return mac[0] | (__u64)mac[1] << 8 | (__u64)mac[2] << 16 | (__u64)mac[3] << 24 | (__u64)mac[4] << 32 |
	       (__u64)mac[5] << 40;
}

/* The slot of (bridge, mac): one multiplication (Fibonacci hashing) of the MAC's last four
 * bytes, where addresses differ (the first ones are often a vendor's), mixed with the bridge.
 * The bucket of moves the check needs is in the slot, written by the controller with the key
 * (fdb_bucket() of it, as for the hash map's entries), so the frame hashes the MAC once.
 * dataplane.fdbSlotOf computes the same. */
static __always_inline __u32 fdb_slot_of(__u32 bridge, const __u8 *mac)
{
	__u32 x = (mac[2] | (__u32)mac[3] << 8 | (__u32)mac[4] << 16 | (__u32)mac[5] << 24) ^ bridge;

	return (x * 0x9e3779b1u) >> (32 - LFP_FDB_SLOT_BITS);
}

/* Linux's bridge restarts an entry's age with every frame it receives from the address
 * (br_fdb_update()); frames the fast path switches never reach it, and an address that only
 * ever sends through the fast path would age out in Linux (which would then flood frames to it).
 * So once per cfg_fdb_refresh_jiffies, one frame from each learned address on a learning port goes
 * to Linux, whose bridge refreshes the entry from a real frame on its real port and then forwards
 * it as the fast path would have. (Asking Linux to refresh the entry instead, with NTF_USE, moved
 * it to the port given in the request, which the bridge may just have moved it away from.) The
 * entry's last refresh is kept beside it (where, written here only) with the generation gen of
 * the slot it was read from (0 in the hash map): an entry the controller writes anew has 0 there,
 * or a slot's older generation, and its first frame goes to Linux. Returns 1 for the frame to
 * hand over. The clock is jiffies: the verifier inlines bpf_jiffies64() as a load of jiffies_64,
 * where bpf_ktime_get_coarse_ns(), of the same tick's resolution, is a helper call for every
 * bridged frame (~10 ns here, where every return is mispredicted). */
static __always_inline int fdb_refresh_due(__u64 *where, __u16 gen)
{
	__u64 now = bpf_jiffies64(), seen = *(volatile __u64 *)where;

	if ((__u16)seen == gen && now - (seen >> 16) < cfg_fdb_refresh_jiffies)
		return 0;
	*where = now << 16 | gen;
	return 1;
}

/* fdb_get()'s way through the hash map. At tc a global function, verified once on its own:
 * inlined, the slot's way and this one reached the rest of the bridge program as separate
 * verifier states, and the tc program of a bridge port that routes came within 5% of the
 * verifier's limit (887k of 1M instructions; 563k with the call). A global function takes
 * scalars and pointers to the caller's stack: the MAC comes as its six bytes in a word. Only
 * a frame whose MAC's slot holds another entry, or is being rewritten, makes the call. */
static __always_inline int fdb_get_map_in(__u32 bridge, const __u8 *mac, struct fdb_ent *e, __u32 learn_port)
{
	struct lfp_fdb_val *v = fdb_lookup(bridge, mac);

	if (!v)
		return 0;
	e->port = v->port;
	e->flags = v->flags;
	e->refresh = learn_port && e->port == learn_port && !(e->flags & LFP_FDB_LOCAL) && fdb_refresh_due(&v->seen, 0);
	return 1;
}

#if LFP_TC
__attribute__((noinline)) int fdb_get_map_tc(__u32 bridge, __u64 mac48, struct fdb_ent *e, __u32 learn_port)
{
	__u8 mac[8];

	if (!e)
		return 0;
	*(__u64 *)mac = mac48;
	return fdb_get_map_in(bridge, mac, e, learn_port);
}
#define fdb_get_map(bridge, mac, e, learn_port) fdb_get_map_tc(bridge, fdb_mac48(mac), e, learn_port)
#else
#define fdb_get_map fdb_get_map_in
#endif

/* The mirror's entry for mac on bridge into *e: 1, or 0 for none (as fdb_lookup()'s NULL: none,
 * or one the bridge may have moved or deleted since the controller read it). From its slot,
 * else from the hash map: the slot holds another key, none, or is being rewritten. learn_port:
 * for a source address received on a learning port, that port; then e->refresh says whether
 * the frame is the entry's refresh, where the entry is on that port and not local (0: not
 * asked). */
static __always_inline int fdb_get(__u32 bridge, const __u8 *mac, struct fdb_ent *e, __u32 learn_port)
{
	__u32 i = fdb_slot_of(bridge, mac), b;
	struct lfp_fdb_slot *s = bpf_map_lookup_elem(&lfp_fdb_slots, &i);

	if (s) {
		__u64 wm = *(volatile __u64 *)&s->mac, wb = *(volatile __u64 *)&s->bridge;
		__u64 wp = *(volatile __u64 *)&s->port, wv = *(volatile __u64 *)&s->moved;
		__u16 gen = (__u16)wm;

		/* One test of all five (no branch per word): each way to fail would otherwise reach
		 * the hash map's lookup as a state of its own for the verifier. */
		if (!((((wb ^ wm) | (wp ^ wm) | (wv ^ wm)) & 0xffff) | ((wm >> 16) ^ fdb_mac48(mac)) |
		      ((wb >> 32) ^ bridge))) {
			__u64 *n;

			b = (wp >> 16) & (LFP_FDB_MOVE_BUCKETS - 1);
			n = bpf_map_lookup_elem(&lfp_fdb_moves, &b);
			if (!n || wv >> 16 != (*(volatile __u64 *)n & LFP_FDB_MOVED_MASK))
				return 0;
			e->port = wp >> 32;
			e->flags = (__u16)(wb >> 16);
			e->refresh = learn_port && e->port == learn_port && !(e->flags & LFP_FDB_LOCAL) &&
				     fdb_refresh_due(&s->seen, gen);
			return 1;
		}
	}
	return fdb_get_map(bridge, mac, e, learn_port);
}

static __always_inline struct lfp_l2_dev *l2_dev(__u32 ifindex)
{
	struct lfp_l2_dev *d;

	if (ifindex < LFP_IFS_DIRECT)
		d = bpf_map_lookup_elem(&lfp_l2, &ifindex);
	else
		d = l2_dev_hi(ifindex);
	return d && d->bridge ? d : NULL;
}

/* br_forward()'s choice of port for a unicast frame on `bridge` whose destination MAC has the
 * mirror's entry dst (fdb_get(); NULL: none), and should_deliver()'s checks on it. in_port is
 * the ingress port (0 for a packet the bridge device transmits, as br_dev_xmit() does for routed
 * packets), in_flags its LFP_L2_* flags. l3len is the size of the packet after the Ethernet
 * header, as it will leave. On success *out is the port's ifindex. A caller that has looked the
 * destination up already passes its entry: Linux looks it up once per frame
 * (br_handle_frame_finish()), and a second lookup cost a hash lookup per bridged frame. */
static __always_inline enum lfp_reason bridge_out(__u32 bridge, const struct fdb_ent *dst, __u32 in_port,
						  __u32 in_flags, __u32 l3len, __u32 *out)
{
	struct lfp_l2_dev *op;
	enum lfp_reason r;

	/* A change to the bridge device itself (ip link set ... type bridge: vlan_filtering,
	 * ageing_time, nf_call_iptables ...) fences its entry only: its frames, which go between
	 * two ports, are Linux's until the controller follows it, as a change to either port makes
	 * them (gate.h). */
	r = gate_egress(bridge);
	if (r != LFP_FORWARDED)
		return r;
	/* Unknown unicast: Linux floods it to every port. */
	if (!dst)
		return LFP_PASS_BR_DST_UNKNOWN;
	/* A local entry: Linux passes the frame up to the bridge device (the caller routes frames to
	 * the bridge's own MAC; for the others see bridge_rx). From br_dev_xmit() a local entry has
	 * no port. */
	if (dst->flags & LFP_FDB_LOCAL)
		return LFP_PASS_BR_LOCAL;
	/* Back out the ingress port: dropped unless hairpin mode, which is Linux's. */
	if (dst->port == in_port)
		return LFP_PASS_BR_EGRESS;
	op = l2_dev(dst->port);
	/* should_deliver(): the port must forward (STP state); an isolated port does not forward to
	 * another isolated port. A stale entry (port gone or moved to another bridge) is Linux's. */
	if (!op || op->bridge != bridge || (op->flags & LFP_L2_BRIDGE) || !(op->flags & LFP_L2_FORWARDING))
		return LFP_PASS_BR_EGRESS;
	if ((in_flags & LFP_L2_ISOLATED) && (op->flags & LFP_L2_ISOLATED))
		return LFP_PASS_BR_EGRESS;
	/* br_dev_queue_push_xmit() drops what the port's MTU does not allow (and with br_netfilter
	 * it would fragment): leave both to Linux. */
	if (l3len > op->mtu)
		return LFP_PASS_BR_EGRESS;
	*out = dst->port;
	return LFP_FORWARDED;
}

/* bridge_out() for a caller holding the hash map's entry (fdb_lookup()). */
static __always_inline enum lfp_reason bridge_out_entry(__u32 bridge, const struct lfp_fdb_val *dst,
							__u32 in_port, __u32 in_flags, __u32 l3len, __u32 *out)
{
	struct fdb_ent e = {};

	if (!dst)
		return bridge_out(bridge, NULL, in_port, in_flags, l3len, out);
	e.port = dst->port;
	e.flags = dst->flags;
	return bridge_out(bridge, &e, in_port, in_flags, l3len, out);
}

/* bridge_out() for the destination MAC dmac. */
static __always_inline enum lfp_reason bridge_out_port(__u32 bridge, const __u8 *dmac, __u32 in_port,
						       __u32 in_flags, __u32 l3len, __u32 *out)
{
	struct fdb_ent dst;

	if (!fdb_get(bridge, dmac, &dst, 0))
		return bridge_out(bridge, NULL, in_port, in_flags, l3len, out);
	return bridge_out(bridge, &dst, in_port, in_flags, l3len, out);
}

#endif
