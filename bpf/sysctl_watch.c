/* Sysctl writes have no netlink event (except netconf for forwarding, rp_filter and proxy_ndp).
 * This cgroup/sysctl program, attached at the root of the cgroup v2 hierarchy, sees every write
 * under /proc/sys/net by a process of this network namespace, counts it in the fence's sysctl
 * unit (include/fence.h) and hands its name to the controller. The controller re-reads the
 * sysctls that change forwarding and opens the fence: at once for a write of any other sysctl,
 * and for one of those only with a read made shortly after (the hook runs before the value is
 * stored). It only observes: it always lets the access proceed unchanged. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "fence.h"
#include "kernel_ns.h"

#define LFP_SYSCTL_NAME 128 /* a power of two: indexes are masked with it */

char LICENSE[] SEC("license") = "GPL";

struct nsproxy {
	struct net *net_ns;
} __attribute__((preserve_access_index));

struct task_struct {
	struct nsproxy *nsproxy;
} __attribute__((preserve_access_index));

/* The namespace whose writes count (its /proc/<pid>/ns/net inode); 0: every namespace's, where
 * the writer's namespace cannot be read. */
volatile const __u32 cfg_netns = 0;

/* One record per write: the sysctl's name under /proc/sys, NUL-terminated (a longer name is
 * cut; the controller takes a cut one as mattering). */
struct lfp_sysctl_event {
	char name[LFP_SYSCTL_NAME];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} lfp_sysctl_events SEC(".maps");

#define VALUE_MAX 32

/* The length of a value without its trailing newlines. */
static __always_inline long value_len(const char *v, long n)
{
	for (int i = 0; i < VALUE_MAX && n > 0; i++) {
		if (v[(n - 1) & (VALUE_MAX - 1)] != '\n')
			break;
		n--;
	}
	return n;
}

/* The write stores what the sysctl holds already (a CNI plugin sets ip_forward=1 for every pod
 * it adds): nothing changes. */
static __always_inline int unchanged(struct bpf_sysctl *ctx)
{
	char cur[VALUE_MAX] = {}, next[VALUE_MAX] = {};
	long cl, nl;

	cl = bpf_sysctl_get_current_value(ctx, cur, sizeof(cur));
	nl = bpf_sysctl_get_new_value(ctx, next, sizeof(next));
	if (cl < 0 || nl < 0 || cl >= VALUE_MAX || nl >= VALUE_MAX)
		return 0;
	cl = value_len(cur, cl);
	nl = value_len(next, nl);
	if (cl != nl)
		return 0;
	for (int i = 0; i < VALUE_MAX; i++) {
		if (i >= cl)
			return 1;
		if (cur[i] != next[i])
			return 0;
	}
	return 1;
}

/* name (len characters) starts with, or ends with, the n characters of p. */
static __always_inline int starts(const char *name, const char *p, int n)
{
	for (int i = 0; i < n; i++)
		if (name[i & (LFP_SYSCTL_NAME - 1)] != p[i])
			return 0;
	return 1;
}

static __always_inline int ends(const char *name, long len, const char *p, int n)
{
	if (len < n)
		return 0;
	for (int i = 0; i < n; i++)
		if (name[(len - n + i) & (LFP_SYSCTL_NAME - 1)] != p[i])
			return 0;
	return 1;
}

/* Whether the new value written is "0". */
static __always_inline int writes_zero(struct bpf_sysctl *ctx)
{
	char next[VALUE_MAX] = {};
	long nl = bpf_sysctl_get_new_value(ctx, next, sizeof(next));

	return nl >= 0 && nl < VALUE_MAX && value_len(next, nl) == 1 && next[0] == '0';
}

/* A device's knob (net/ipv4/conf/<dev>/..., net/ipv6/conf/<dev>/...) other than those the
 * controller reads or the FIB cache depends on (observe's forwardingSysctl: forwarding,
 * rp_filter, disable_ipv6, proxy_ndp, ignore_routes_with_linkdown, the IPv6 mtu, and accept_ra
 * set to anything but 0, which may let routes in from router advertisements): a CNI plugin
 * writes accept_ra=0 and the like for every pod it adds, and such a write must not fence
 * anything even for the moment the controller takes to tell it apart. Every other name under
 * net/ is handed to the controller, which tells the rest apart. */
static __always_inline int other_device_knob(struct bpf_sysctl *ctx, const char *name, long len)
{
	if (len < 0 || len >= LFP_SYSCTL_NAME - 1)
		return 0; /* cut: may be anything */
	if (!starts(name, "net/ipv4/conf/", 14) && !starts(name, "net/ipv6/conf/", 14))
		return 0;
	if (ends(name, len, "/accept_ra", 10))
		return writes_zero(ctx);
	return !ends(name, len, "/forwarding", 11) && !ends(name, len, "/rp_filter", 10) &&
	       !ends(name, len, "/disable_ipv6", 13) && !ends(name, len, "/proxy_ndp", 10) &&
	       !ends(name, len, "/ignore_routes_with_linkdown", 28) && !ends(name, len, "/mtu", 4);
}

SEC("cgroup/sysctl")
int lfp_sysctl_write(struct bpf_sysctl *ctx)
{
	struct task_struct *task;
	struct lfp_sysctl_event *ev;
	struct lfp_fence *fence;
	char name[4] = {};
	__u32 zero = 0;

	if (!ctx->write)
		return 1;
	/* The full name starts with "net/"; -E2BIG only says it is longer than the buffer. */
	bpf_sysctl_get_name(ctx, name, sizeof(name), 0);
	if (name[0] != 'n' || name[1] != 'e' || name[2] != 't')
		return 1;
	/* /proc/sys/net shows the writer's namespace. */
	task = (struct task_struct *)bpf_get_current_task();
	if (cfg_netns && BPF_CORE_READ(task, nsproxy, net_ns, ns.inum) != cfg_netns)
		return 1;
	if (unchanged(ctx))
		return 1;
	/* The record first: the controller opens the fence for a count of writes only once it has
	 * seen as many names. A full ring leaves the fence closed until a later read. */
	ev = bpf_ringbuf_reserve(&lfp_sysctl_events, sizeof(*ev), 0);
	if (ev) {
		long len = bpf_sysctl_get_name(ctx, ev->name, sizeof(ev->name), 0);

		if (other_device_knob(ctx, ev->name, len)) {
			bpf_ringbuf_discard(ev, 0);
			return 1;
		}
		bpf_ringbuf_submit(ev, 0);
	}
	fence = bpf_map_lookup_elem(&lfp_fence_map, &zero);
	if (fence)
		__sync_fetch_and_add(&fence->seq[LFP_FENCE_SYSCTL], 1);
	return 1;
}
