package dataplane

// The eBPF objects are generated with clang (make generate) and committed, so `go build` needs no
// clang. -target bpfel: the project runs on little-endian x86_64/arm64 hosts. One source, two
// objects: linuxfp (XDP) and linuxfpTc (tcx ingress, -DLFP_HOOK_TC); the shared types come from
// the first, and so do the settings (settings_gen.go, from the LFP_SETTING declarations).
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I../../bpf/include" -type lfp_counter -type lfp_neigh_key -type lfp_stale_val -type lfp_config -type lfp_lpm4_key -type lfp_lpm6_key -type lfp_in6 -type lfp_fdb_key -type lfp_fdb_val -type lfp_l2_dev -type lfp_fw_rule -type lfp_fw_leaf -type lfp_fw_lpm_key -type lfp_fw_set_key -type lfp_fw_if -type lfp_tc_tx -type lfp_ct_req -type lfp_fw_host_key -type lfp_vxlan_dev -type lfp_vxfdb_key -type lfp_vxfdb_val -type lfp_vxlan_rx_key -type lfp_vxlan_rx -type lfp_tc_companion -type lfp_monitor -type lfp_monitor_flags -type lfp_if -type lfp_gate -type lfp_fence -type lfp_ct_flags -type lfp_vx_flags -type lfp_fw_flags -type lfp_fdb_flags -type lfp_l2_flags -type lfp_tx_flags -type lfp_if_flags -type lfp_fib_flags linuxfp ../../bpf/linuxfp.c
//go:generate go tool bpf2go -tags linux -cc clang -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I../../bpf/include -DLFP_HOOK_TC" linuxfpTc ../../bpf/linuxfp.c
//go:generate go run ./internal/gensettings linuxfp_bpfel.o settings_gen.go
