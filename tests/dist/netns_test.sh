#!/bin/sh
# Ring attention across a real network: two network namespaces ("hosts" A
# and B) joined by a veth pair with 10.231.0.1/30 and 10.231.0.2/30, one rank
# in each, talking TCP only (btl tcp,self, both restricted to the veth pair).
# mpirun runs in A; it starts B's daemon through a launch agent made here
# that enters B with `ip netns exec` where Open MPI would use ssh.
#
#   tests/dist/netns_test.sh MPIRUN RING_TEST
#
# Exits 77 (CTest's SKIP_RETURN_CODE) when not root or when network
# namespaces cannot be made; removes the namespaces whatever happens.
set -u
mpirun=$1
ring_test=$2

skip() {
  echo "netns test skipped: $1"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (ip netns add)"
command -v ip >/dev/null 2>&1 || skip "needs ip (apt-get install iproute2)"

tag=$$
ns_a=sdpa_ring_a_$tag
ns_b=sdpa_ring_b_$tag
dev_a=sra$tag
dev_b=srb$tag
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

ip netns add "$ns_a" 2>/dev/null || skip "ip netns add is not permitted here"
ip netns add "$ns_b" || skip "ip netns add is not permitted here"
ip link add "$dev_a" type veth peer name "$dev_b" 2>/dev/null || skip "veth pairs cannot be made here"
ip link set "$dev_a" netns "$ns_a" && ip link set "$dev_b" netns "$ns_b" || exit 1
ip -n "$ns_a" addr add 10.231.0.1/30 dev "$dev_a" && ip -n "$ns_b" addr add 10.231.0.2/30 dev "$dev_b" || exit 1
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up || exit 1
done
ip -n "$ns_a" link set "$dev_a" up && ip -n "$ns_b" link set "$dev_b" up || exit 1

# The launch agent: Open MPI calls it as `agent HOST COMMAND...`, like ssh,
# and the command is a shell command line.
cat >"$work/agent" <<AGENT
#!/bin/sh
host=\$1
shift
case "\$host" in
  10.231.0.2) exec ip netns exec $ns_b sh -c "\$*" ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
AGENT
chmod +x "$work/agent"
printf '10.231.0.1 slots=1\n10.231.0.2 slots=1\n' >"$work/hosts"

run() {
  ip netns exec "$ns_a" timeout 120 "$mpirun" --allow-run-as-root -np 2 --hostfile "$work/hosts" \
    --map-by node --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/30 --mca oob_tcp_if_include 10.231.0.0/30 "$@"
}
tx_bytes() {
  ip netns exec "$ns_a" cat "/sys/class/net/$dev_a/statistics/tx_bytes"
}

# Where the ranks run: each prints the veth address of its namespace.
where=$(run sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(ip -o -4 addr show | grep -o "10\.231\.0\.[12]")"')
echo "$where"
echo "$where" | grep -q "rank 1 on 10.231.0.2" || { echo "netns test: rank 1 is not in $ns_b" >&2; exit 1; }
echo "$where" | grep -q "rank 0 on 10.231.0.1" || { echo "netns test: rank 0 is not in $ns_a" >&2; exit 1; }

before=$(tx_bytes)
run "$ring_test"
rc=$?
sent=$(( $(tx_bytes) - before ))
echo "netns test: mpirun exited $rc; $sent bytes left host A over the veth pair"
[ "$rc" = 0 ] || exit "$rc"
# The ring moves K/V blocks of every case both ways: far more than the launch's chatter.
[ "$sent" -gt 500000 ] || { echo "netns test: expected the blocks over the veth pair, saw $sent bytes" >&2; exit 1; }
exit 0
