/* Sysctl writes have no netlink event (except netconf for forwarding, rp_filter and proxy_ndp).
 * This cgroup/sysctl program, attached at the root of the cgroup v2 hierarchy, sees every write
 * under /proc/sys/net and wakes the controller, which re-reads the sysctls that change
 * forwarding. It only observes: it always lets the access proceed unchanged. It runs before the
 * value is stored, so the controller reads again shortly after each wake-up. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} lfp_sysctl_events SEC(".maps");

SEC("cgroup/sysctl")
int lfp_sysctl_write(struct bpf_sysctl *ctx)
{
	char name[4] = {};
	__u32 one = 1;

	if (!ctx->write)
		return 1;
	/* The full name starts with "net/"; -E2BIG only says it is longer than the buffer. */
	bpf_sysctl_get_name(ctx, name, sizeof(name), 0);
	if (name[0] != 'n' || name[1] != 'e' || name[2] != 't')
		return 1;
	/* A full ring only means a wake-up is already pending. */
	bpf_ringbuf_output(&lfp_sysctl_events, &one, sizeof(one), 0);
	return 1;
}
