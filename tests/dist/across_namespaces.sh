#!/bin/bash
# test_dist with its ranks on two virtual hosts: two network namespaces joined by a veth pair, each
# with a hostname of its own, so Open MPI treats them as two nodes and every message between them
# crosses a network (TCP over the veth) instead of shared memory. Four ranks, dealt to the hosts in
# turn, so every hop of the ring goes from one host to the other.
#
#   across_namespaces.sh TEST_DIST [MPIEXEC]
#
# Exits 77 (ctest: skipped) where namespaces cannot be made (no root, no CAP_NET_ADMIN, no ip).
# Called by mpirun as its rsh agent with --agent HOST COMMAND...: runs COMMAND in HOST's namespace.
set -euo pipefail

subnet=10.213.7
if [[ "${1:-}" == --agent ]]; then
  host=$2
  shift 2
  ns="${QKV_NETNS_PREFIX}${host##*.}"
  exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"
fi

test_dist=$1
mpiexec=${2:-mpirun}
prefix="qkv$$n"  # namespaces qkv<pid>n1 and qkv<pid>n2, also the veth ends' names (<= 15 chars)
export QKV_NETNS_PREFIX=$prefix

skip() {
  echo "skipped: $1"
  exit 77
}
for tool in ip unshare; do
  command -v "$tool" >/dev/null || skip "no $tool here (Debian: iproute2, util-linux)"
done

work=$(mktemp -d)
cleanup() {
  ip netns del "${prefix}1" 2>/dev/null || true
  ip netns del "${prefix}2" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "${prefix}1" 2>"$work/err" ||
  skip "cannot make a network namespace here (needs root with CAP_NET_ADMIN): $(cat "$work/err")"
ip netns add "${prefix}2"
ip link add "${prefix}1" type veth peer name "${prefix}2"
for n in 1 2; do
  ip link set "${prefix}$n" netns "${prefix}$n"
  ip -n "${prefix}$n" addr add "$subnet.$n/24" dev "${prefix}$n"
  ip -n "${prefix}$n" link set lo up
  ip -n "${prefix}$n" link set "${prefix}$n" up
done
printf '%s.1 slots=2\n%s.2 slots=2\n' "$subnet" "$subnet" >"$work/hosts"

# mpirun itself runs on host 1; host 2 is reached through the agent (this script).
run() {
  ip netns exec "${prefix}1" unshare --uts sh -c "hostname ${prefix}1 && $(printf '%q ' "$@")"
}
mpi=("$mpiexec" --hostfile "$work/hosts" -np 4 --map-by node
  --mca plm_rsh_agent "$(realpath "$0") --agent" --mca btl tcp,vader,self
  --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24"
  -x OMP_NUM_THREADS)
[[ -v ASAN_OPTIONS ]] && mpi+=(-x ASAN_OPTIONS)
tx_bytes() { ip netns exec "${prefix}1" cat "/sys/class/net/${prefix}1/statistics/tx_bytes"; }

hosts=$(run "${mpi[@]}" hostname | sort -u | tr '\n' ' ')
echo "ranks ran on: $hosts"
[[ "$hosts" == "${prefix}1 ${prefix}2 " ]] || {
  echo "FAILED: expected ranks on ${prefix}1 and ${prefix}2"
  exit 1
}

before=$(tx_bytes)
run "${mpi[@]}" "$test_dist"
sent=$(($(tx_bytes) - before))
echo "host 1 sent $sent bytes over the veth"
# test_dist's ring moves megabytes of K, V and gradients between the hosts: under 1 MB would mean
# the ranks talked some other way.
((sent > 1000000)) || {
  echo "FAILED: expected more than 1 MB between the hosts"
  exit 1
}
