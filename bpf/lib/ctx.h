/* Context abstraction: the fast-path modules use these instead of struct xdp_md or struct
 * __sk_buff, so one source builds for both hooks. bpf/linuxfp.c is compiled twice: as is for XDP,
 * and with -DLFP_HOOK_TC for the TC (tcx) ingress hook. What only one hook can do is a stub in the
 * other (it fails, or does nothing, where the caller's result is then the one it has on that hook),
 * so module bodies carry no #if. */
#ifndef LFP_CTX_H
#define LFP_CTX_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "parse.h"

/* The kernel's own structure behind the context (struct sk_buff, struct xdp_buff). */
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

#define CTX_CSUM_NONE        0
#define CTX_CSUM_UNNECESSARY 1
#define CTX_CSUM_COMPLETE    2
#define CTX_CSUM_PARTIAL     3

/* The packet's checksum state (ctx_csum_state). */
struct ctx_csum {
	__u32 ip_summed; /* CTX_CSUM_* */
	__s32 start;     /* PARTIAL: where the checksummed part starts, from ctx_data */
	__u32 offset;    /* PARTIAL: where the checksum goes, from start */
	__u32 l4_hash;   /* the skb's hash is an L4 one */
	__u32 encap;     /* skb->encapsulation: a tunnel's offloads (inner headers) are set up */
};

#ifdef LFP_HOOK_TC

typedef struct __sk_buff lfp_ctx;

#define LFP_TC 1
/* Hand the packet to Linux untouched: TCX_NEXT (TC_ACT_UNSPEC), not TC_ACT_OK. tcx runs its
 * programs first and the classic tc filters only when the last program returned TCX_NEXT; OK
 * would skip them, where Linux alone would have run them. */
#define CTX_PASS     TC_ACT_UNSPEC
#define CTX_DROP     TC_ACT_SHOT
#define CTX_REDIRECT TC_ACT_REDIRECT

#else /* XDP */

typedef struct xdp_md lfp_ctx;

#define LFP_TC 0
#define CTX_PASS     XDP_PASS
#define CTX_DROP     XDP_DROP
#define CTX_REDIRECT XDP_REDIRECT

#endif

/* struct xdp_md and struct __sk_buff both carry these as 32-bit offsets. */
static __always_inline void *ctx_data(const lfp_ctx *ctx)
{
	return (void *)(long)ctx->data;
}

static __always_inline void *ctx_data_end(const lfp_ctx *ctx)
{
	return (void *)(long)ctx->data_end;
}

static __always_inline void *ctx_data_meta(const lfp_ctx *ctx)
{
	return (void *)(long)ctx->data_meta;
}


#ifdef LFP_HOOK_TC

/* The whole packet, including what is not in the linear part (ctx_data_end). */
static __always_inline __u32 ctx_len(const lfp_ctx *ctx)
{
	return ctx->len;
}

static __always_inline __u32 ctx_full_len(const lfp_ctx *ctx)
{
	return ctx->len;
}

/* At tc ingress skb->dev is the device the frame arrived on. The context pointer is made opaque
 * first: read in several places, the compiler would keep &ctx->ifindex in a register, and the
 * verifier refuses a context access through a modified pointer. */
static __always_inline __u32 ctx_ingress_ifindex(const lfp_ctx *ctx)
{
	asm volatile("" : "+r"(ctx));
	return ctx->ifindex;
}

/* The modules read headers through ctx_data/ctx_data_end, which cover only the skb's linear part.
 * Make the first `bytes` bytes (or the whole packet, if shorter) linear; a no-op when they are.
 * Every packet pointer is invalid afterwards. */
static __always_inline void ctx_pull(lfp_ctx *ctx, __u32 bytes)
{
	__u32 len = ctx->len;

	if (len > bytes)
		len = bytes;
	if (ctx_data(ctx) + len > ctx_data_end(ctx))
		bpf_skb_pull_data(ctx, len);
}

/* An skb's data beyond its linear part is reached with ctx_pull(): never a reason to pass. */
static __always_inline int ctx_multi_buffer(lfp_ctx *ctx)
{
	return 0;
}

/* GSO: the skb is a train of segments of gso_size payload bytes each (0: a single packet). */
static __always_inline __u32 ctx_gso_size(const lfp_ctx *ctx)
{
	return ctx->gso_size;
}

/* A VLAN tag the stack has already taken out of the frame (hardware acceleration or
 * skb_vlan_untag() before tc ingress): the data no longer shows it. */
static __always_inline int ctx_vlan_tagged(const lfp_ctx *ctx)
{
	return ctx->vlan_present;
}

/* Drop `bytes` from the end of the packet (Ethernet padding beyond the IP length). Every packet
 * pointer is invalid afterwards. */
static __always_inline int ctx_trim(lfp_ctx *ctx, __u32 bytes)
{
	return bpf_skb_change_tail(ctx, ctx->len - bytes, 0);
}

/* The skb's checksum state, which struct __sk_buff does not show: read from the kernel's
 * struct sk_buff (bpf_cast_to_kern_ctx(); CO-RE relocates these fields, bitfields included). */
struct sk_buff {
	unsigned char *head, *data;
	union {
		__u32 csum;
		struct {
			__u16 csum_start;
			__u16 csum_offset;
		};
	};
	__u8 ip_summed : 2;
	__u8 csum_level : 2;
	__u8 l4_hash : 1;
	__u8 sw_hash : 1;
	__u8 encapsulation : 1;
} __attribute__((preserve_access_index));

static __always_inline void ctx_csum_state(lfp_ctx *ctx, struct ctx_csum *c)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	c->ip_summed = BPF_CORE_READ_BITFIELD(skb, ip_summed);
	c->l4_hash = BPF_CORE_READ_BITFIELD(skb, l4_hash);
	c->encap = BPF_CORE_READ_BITFIELD(skb, encapsulation);
	c->start = (__s32)((long)skb->head + skb->csum_start - (long)skb->data);
	c->offset = skb->csum_offset;
}

/* Writes that keep the skb's checksum state right (CHECKSUM_COMPLETE's sum, PARTIAL's pseudo
 * header): the helpers. */
static __always_inline int ctx_store_bytes(lfp_ctx *ctx, __u32 off, const void *from, __u32 len, __u64 flags)
{
	return bpf_skb_store_bytes(ctx, off, from, len, flags);
}

static __always_inline int ctx_l3_csum_replace(lfp_ctx *ctx, __u32 off, __u32 from, __u32 to, __u64 size)
{
	return bpf_l3_csum_replace(ctx, off, from, to, size);
}

static __always_inline int ctx_l4_csum_replace(lfp_ctx *ctx, __u32 off, __u32 from, __u32 to, __u64 flags)
{
	return bpf_l4_csum_replace(ctx, off, from, to, flags);
}

static __always_inline int ctx_load_bytes(lfp_ctx *ctx, __u32 off, void *to, __u32 len)
{
	return bpf_skb_load_bytes(ctx, off, to, len);
}

/* The conntrack lookup kfunc of this hook (declared in ct.h). */
#define ctx_ct_lookup bpf_skb_ct_lookup

/* Encapsulation and decapsulation as the vxlan driver does them (vxlan.h) need an skb: its mark,
 * flow hash, room at the front with the checksum and GSO state adjusted, and a way into a
 * device's receive path. */
#define CTX_TUNNEL 1

static __always_inline __u32 ctx_mark(const lfp_ctx *ctx)
{
	return ctx->mark;
}

/* skb_get_hash(), which the helper calls: a hash the skb holds already (from its L4 flow, as a
 * TCP sender's, or computed in software earlier) is returned as it is; only without one is it
 * computed. That test read here saves the call where the hash is there. */
static __always_inline __u32 ctx_hash_recalc(lfp_ctx *ctx)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	if (BPF_CORE_READ_BITFIELD(skb, l4_hash) || BPF_CORE_READ_BITFIELD(skb, sw_hash))
		return ctx->hash;
	return bpf_get_hash_recalc(ctx);
}

/* CHECKSUM_COMPLETE: the skb's sum covers its data, so a write must go through a helper that
 * updates it; any other state, a plain write is what that helper would do (its sum updates act
 * on COMPLETE only, and on a PARTIAL sum starting before the data, which no write here makes). */
static __always_inline int ctx_csum_complete(lfp_ctx *ctx)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	return BPF_CORE_READ_BITFIELD(skb, ip_summed) == CTX_CSUM_COMPLETE;
}

static __always_inline void ctx_clear_hash(lfp_ctx *ctx)
{
	bpf_set_hash_invalid(ctx);
}

static __always_inline void ctx_csum_level_dec(lfp_ctx *ctx)
{
	bpf_csum_level(ctx, BPF_CSUM_LEVEL_DEC);
}

static __always_inline int ctx_adjust_room(lfp_ctx *ctx, __s32 len_diff, __u32 mode, __u64 flags)
{
	return bpf_skb_adjust_room(ctx, len_diff, mode, flags);
}

static __always_inline int ctx_redirect_ingress(lfp_ctx *ctx, __u32 ifindex)
{
	return bpf_redirect(ifindex, BPF_F_INGRESS);
}

/* How a packet leaves (tx.h): an skb may be redirected to any device, and carries the priority
 * the egress qdisc may classify by. */
#define CTX_REDIRECT_BY_DEVMAP 0

static __always_inline void ctx_set_priority(lfp_ctx *ctx, __u32 prio)
{
	ctx->priority = prio;
}

static __always_inline __u32 ctx_priority(lfp_ctx *ctx)
{
	return ctx->priority;
}

static __always_inline void ctx_redirect(lfp_ctx *ctx, __u32 ifindex)
{
	bpf_redirect(ifindex, 0);
}

static __always_inline void ctx_redirect_peer(lfp_ctx *ctx, __u32 ifindex)
{
	bpf_redirect_peer(ifindex, 0);
}

static __always_inline int ctx_redirect_map(void *map, __u32 key)
{
	return -1;
}

/* XDP metadata in front of the packet (stats.h: the mark for the tc program after XDP). */
static __always_inline int ctx_adjust_meta(lfp_ctx *ctx, int delta)
{
	return -1;
}

#else /* XDP */

/* The frame is all in [data, data_end): multi-buffer frames are handed to Linux before any
 * module runs (ctx_multi_buffer). */
static __always_inline __u32 ctx_len(const lfp_ctx *ctx)
{
	return ctx->data_end - ctx->data;
}

/* The whole frame, fragments included (see ctx_multi_buffer). */
static __always_inline __u32 ctx_full_len(const lfp_ctx *ctx)
{
	return bpf_xdp_get_buff_len((lfp_ctx *)ctx);
}

/* The kernel's struct xdp_buff: its flags say whether the frame has fragments. */
struct xdp_buff {
	__u32 flags;
} __attribute__((preserve_access_index));

enum xdp_buff_flags {
	XDP_FLAGS_HAS_FRAGS = 1,
};

/* The XDP program is loaded frags-aware (SEC("xdp.frags"), BPF_F_XDP_HAS_FRAGS): without that,
 * veth refuses the program while its peer's MTU exceeds what fits in a page (3506 bytes) and
 * caps the peer's MTU there while it is attached, which would make a user's `ip link set ...
 * mtu 9000` fail. The price is that a frame may now arrive in several buffers (a jumbo frame on
 * a veth, a GRO train at generic XDP), with the bytes beyond data_end in fragments that direct
 * packet access cannot read. The flag is read from the kernel's xdp_buff rather than compared
 * with bpf_xdp_get_buff_len(): that helper call cost every frame ~7 ns here
 * (BPF_PROG_TEST_RUN), the load ~0. */
static __always_inline int ctx_multi_buffer(lfp_ctx *ctx)
{
	struct xdp_buff *x = bpf_cast_to_kern_ctx(ctx);

	return x->flags & bpf_core_enum_value(enum xdp_buff_flags, XDP_FLAGS_HAS_FRAGS);
}

static __always_inline __u32 ctx_ingress_ifindex(const lfp_ctx *ctx)
{
	asm volatile("" : "+r"(ctx)); /* see the tc version */
	return ctx->ingress_ifindex;
}

static __always_inline void ctx_pull(lfp_ctx *ctx, __u32 bytes)
{
}

static __always_inline __u32 ctx_gso_size(const lfp_ctx *ctx)
{
	return 0;
}

/* XDP sees the frame as it came: a tag is in the data (and not IPv4/IPv6 EtherType). */
static __always_inline int ctx_vlan_tagged(const lfp_ctx *ctx)
{
	return 0;
}

static __always_inline int ctx_trim(lfp_ctx *ctx, __u32 bytes)
{
	return bpf_xdp_adjust_tail(ctx, -(int)bytes);
}

/* An XDP frame has no checksum state: what it carries is complete (see the hook choice). */
static __always_inline void ctx_csum_state(lfp_ctx *ctx, struct ctx_csum *c)
{
	c->ip_summed = CTX_CSUM_NONE;
	c->start = 0;
	c->offset = 0;
	c->l4_hash = 0;
	c->encap = 0;
}

/* A frame has no checksum state to keep: direct writes, with the helpers' arithmetic (the same
 * incremental updates, a UDP checksum of 0 left alone and a result of 0 sent as 0xffff under
 * BPF_F_MARK_MANGLED_0). */
static __always_inline int ctx_store_bytes(lfp_ctx *ctx, __u32 off, const void *from, __u32 len, __u64 flags)
{
	void *p = ctx_data(ctx) + off;

	if (p + len > ctx_data_end(ctx))
		return -1;
	if (len == 4)
		*(__u32 *)p = *(const __u32 *)from;
	else if (len == 2)
		*(__u16 *)p = *(const __u16 *)from;
	else
		return bpf_xdp_store_bytes(ctx, off, (void *)from, len);
	return 0;
}

static __always_inline int ctx_l3_csum_replace(lfp_ctx *ctx, __u32 off, __u32 from, __u32 to, __u64 size)
{
	__u16 *sum = ctx_data(ctx) + off;

	if ((void *)(sum + 1) > ctx_data_end(ctx))
		return -1;
	*sum = csum_replace(*sum, from, to);
	return 0;
}

static __always_inline int ctx_l4_csum_replace(lfp_ctx *ctx, __u32 off, __u32 from, __u32 to, __u64 flags)
{
	__u16 *sum = ctx_data(ctx) + off;

	if ((void *)(sum + 1) > ctx_data_end(ctx))
		return -1;
	if ((flags & BPF_F_MARK_MANGLED_0) && !*sum)
		return 0;
	*sum = csum_replace(*sum, from, to);
	if ((flags & BPF_F_MARK_MANGLED_0) && !*sum)
		*sum = CSUM_MANGLED_0;
	return 0;
}

static __always_inline int ctx_load_bytes(lfp_ctx *ctx, __u32 off, void *to, __u32 len)
{
	return bpf_xdp_load_bytes(ctx, off, to, len);
}

#define ctx_ct_lookup bpf_xdp_ct_lookup

/* Only an skb can be encapsulated or decapsulated the way the vxlan driver does it (its mark,
 * flow hash, checksum and GSO state) and handed to a device's receive path: at XDP a VXLAN packet
 * takes Linux's path (the graph puts a decapsulating device's underlay on tc, internal/graph:
 * vxlanUnderlay). The stubs below only let the vxlan module build here. */
#define CTX_TUNNEL 0

static __always_inline __u32 ctx_mark(const lfp_ctx *ctx)
{
	return 0;
}

static __always_inline __u32 ctx_hash_recalc(lfp_ctx *ctx)
{
	return 0;
}

static __always_inline int ctx_csum_complete(lfp_ctx *ctx)
{
	return 0;
}

static __always_inline void ctx_clear_hash(lfp_ctx *ctx)
{
}

static __always_inline void ctx_csum_level_dec(lfp_ctx *ctx)
{
}

static __always_inline int ctx_adjust_room(lfp_ctx *ctx, __s32 len_diff, __u32 mode, __u64 flags)
{
	return -1;
}

static __always_inline int ctx_redirect_ingress(lfp_ctx *ctx, __u32 ifindex)
{
	return CTX_PASS;
}

/* A frame leaves only into a device of the devmap lfp_tx_devs (tx.h says why). A frame has no
 * priority, and there is no peer redirect at XDP. */
#define CTX_REDIRECT_BY_DEVMAP 1

static __always_inline void ctx_set_priority(lfp_ctx *ctx, __u32 prio)
{
}

static __always_inline __u32 ctx_priority(lfp_ctx *ctx)
{
	return 0;
}

static __always_inline void ctx_redirect(lfp_ctx *ctx, __u32 ifindex)
{
}

static __always_inline void ctx_redirect_peer(lfp_ctx *ctx, __u32 ifindex)
{
}

/* 0 with the redirect set up; on a miss the frame is untouched. */
static __always_inline int ctx_redirect_map(void *map, __u32 key)
{
	return bpf_redirect_map(map, key, XDP_PASS) == XDP_REDIRECT ? 0 : -1;
}

static __always_inline int ctx_adjust_meta(lfp_ctx *ctx, int delta)
{
	return bpf_xdp_adjust_meta(ctx, delta);
}

#endif

#endif
