package harness

// The benchmark's eBPF objects are generated with clang (make generate) and committed, so `go
// build` needs no clang.
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type gen_state -type gen_dst6 generator ../../../bpf/bench/gen.c
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type sink_counter sink ../../../bpf/bench/sink.c
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" ceiling ../../../bpf/bench/ceiling.c
