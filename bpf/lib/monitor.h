/* The packet monitor: reports the packets the fast path hands to Linux or drops, while
 * `linuxfp monitor` runs. */
#ifndef LFP_MONITOR_H
#define LFP_MONITOR_H

#include "ctx.h"
#include "linuxfp_types.h"

/* Which packets to report; all zero while no monitor is connected. A map, not a setting: a
 * monitor must not reload the programs, nor change the packets' path while it runs. Read only
 * where a packet goes to Linux or is dropped, never on the forwarding path, so a forwarded
 * packet costs the same with or without a monitor. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct lfp_monitor);
	__uint(max_entries, 1);
} lfp_monitor_map SEC(".maps");

/* A perf event array rather than a ring buffer: bpf_perf_event_output() copies the packet's
 * first bytes from the context (BPF_F_CTX_LEN_MASK) for XDP and tc alike, where a ring buffer
 * record would need a bounded copy of a length the verifier cannot know. One buffer per CPU,
 * sized by the controller (max_entries 0: the number of CPUs). */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} lfp_monitor_events SEC(".maps");

/* The most bytes of a packet an event carries (perf samples have a 16-bit size). */
#define LFP_MON_SNAPLEN_MAX 16384

/* Report the packet if a monitor asks for this kind (LFP_MON_PASS or LFP_MON_DROP). A failed
 * output (the reader's buffer is full: it counts the loss) changes nothing for the packet. */
static __always_inline void lfp_monitor(const lfp_ctx *ctx, enum lfp_reason reason, __u32 kind)
{
	struct lfp_monitor_event ev;
	struct lfp_monitor *m;
	__u32 key = 0, cap;

	m = bpf_map_lookup_elem(&lfp_monitor_map, &key);
	if (!m || !(m->flags & kind))
		return;
	__builtin_memset(&ev, 0, sizeof(ev));
	ev.time_ns = bpf_ktime_get_boot_ns();
	ev.ifindex = ctx_ingress_ifindex(ctx);
	ev.len = reason == LFP_PASS_MULTI_BUFFER ? ctx_full_len(ctx) : ctx_len(ctx);
	/* The linear part only (a multi-buffer frame's first buffer): always there to copy. */
	cap = ctx_len(ctx);
	if (cap > m->snaplen)
		cap = m->snaplen;
	if (cap > LFP_MON_SNAPLEN_MAX)
		cap = LFP_MON_SNAPLEN_MAX;
	ev.caplen = cap;
	ev.reason = reason;
	ev.flags = kind;
	ev.tc = LFP_TC;
	bpf_perf_event_output((void *)ctx, &lfp_monitor_events, BPF_F_CURRENT_CPU | ((__u64)cap << 32),
			      &ev, sizeof(ev));
}

#endif
