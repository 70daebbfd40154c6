/* The kernel's network-namespace structures, as far as the watchers read them (CO-RE: offsets
 * come from the running kernel's BTF). A namespace is told by its inode number, the one of
 * /proc/<pid>/ns/net. */
#ifndef LFP_KERNEL_NS_H
#define LFP_KERNEL_NS_H

struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

#endif
