#!/usr/bin/env bash
# Installs what linuxfp's tests and benchmarks need on a fresh Debian machine, only if missing.
# clang/llvm/libbpf-dev are needed only by `make generate` (the BPF objects are committed).
set -euo pipefail
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null || need+=(nftables)
command -v ipset >/dev/null || need+=(ipset)
command -v sysctl >/dev/null || need+=(procps)
command -v ethtool >/dev/null || need+=(ethtool)
command -v ping >/dev/null || need+=(iputils-ping)
command -v brctl >/dev/null || need+=(bridge-utils)
# The image test runs `make image`'s archive under an OCI runtime, as a node would.
command -v runc >/dev/null || need+=(runc)
if [ "${1:-}" = generate ]; then
  command -v clang >/dev/null || need+=(clang llvm)
  [ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
  [ -d /usr/include/x86_64-linux-gnu/asm ] || need+=(gcc-multilib)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# bpffs is not needed (linuxfp pins nothing); the cgroup2 hierarchy is used to watch sysctls.
