/* Context abstraction: fast-path modules use these instead of struct xdp_md, so one source builds
 * for every hook (XDP now; TC is a later issue and adds an skb variant here). */
#ifndef LFP_CTX_H
#define LFP_CTX_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

typedef struct xdp_md lfp_ctx;

#define CTX_PASS XDP_PASS
#define CTX_DROP XDP_DROP

static __always_inline void *ctx_data(const lfp_ctx *ctx)
{
	return (void *)(long)ctx->data;
}

static __always_inline void *ctx_data_end(const lfp_ctx *ctx)
{
	return (void *)(long)ctx->data_end;
}

static __always_inline __u32 ctx_len(const lfp_ctx *ctx)
{
	return ctx->data_end - ctx->data;
}

static __always_inline __u32 ctx_ingress_ifindex(const lfp_ctx *ctx)
{
	return ctx->ingress_ifindex;
}

/* Drop `bytes` from the end of the packet (Ethernet padding beyond the IP length). Every packet
 * pointer is invalid afterwards. */
static __always_inline int ctx_trim(lfp_ctx *ctx, __u32 bytes)
{
	return bpf_xdp_adjust_tail(ctx, -(int)bytes);
}

#endif
