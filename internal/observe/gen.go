package observe

//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I../../bpf/include" sysctlwatch ../../bpf/sysctl_watch.c
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I../../bpf/include" -type lfp_nl_class -type lfp_nl_event -type lfp_fdb_key netlinkwatch ../../bpf/netlink_watch.c
