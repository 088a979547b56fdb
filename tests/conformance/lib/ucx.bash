# Shared by the UCX scripts (ucx.sh on one host, ucx_netns.sh across two network
# namespaces): what UCX looks for that a kernel RDMA device has and a user-space device
# cannot create, provided by the harness in a private mount namespace (as root:
# `unshare -m`; nothing outside the command sees it):
#   - /dev/infiniband/<dev_name> (uverbs0), which UCX stats and requires to be a
#     readable and writable character device before it considers the device usable: a
#     node with /dev/null's numbers, in an overlay over /dev (UCX never opens it);
#   - /sys/class/infiniband/rverbs0/ports/1/gid_attrs/{types,ndevs}/<index>, from which
#     UCX learns each GID's RoCE version and network device (for reachability): written
#     from the device's own GID table (ibv_devinfo -v) and the addresses of the host the
#     command runs in, in an overlay over /sys/class.
# Sourced, not run.

# ucx_mount_setup TMP [PREFIX...]: sets `ucx_argv` to the command prefix that runs a
# command in such a mount namespace (`"${ucx_argv[@]}" CMD ARGS...`). The GID table and
# the addresses are those seen by PREFIX (empty: this host; e.g. `ip netns exec NS env
# LD_LIBRARY_PATH=… RVERBS_RUNTIME_DIR=…` for a namespace with its own runtime
# directory); the prefix must run in that host too, after PREFIX (`ip netns exec` mounts
# a sysfs of its own, which the overlay must cover). The overlays' directories go under
# TMP. Returns 1, saying why, if ibv_devinfo lists no GID.
ucx_mount_setup() {
  local tmp=$1 gids first_if idx gid type ndev setup
  shift
  gids=$("$@" ibv_devinfo -v -d rverbs0 </dev/null |
    sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*\([^,]*\), \(RoCE v[12]\).*/\1 \2 \3/p') || true
  if [ -z "$gids" ]; then
    echo "ucx_mount_setup: no GIDs from ibv_devinfo${1:+ (${*})}" >&2
    return 1
  fi
  first_if=$("$@" ip -o link </dev/null | awk -F': ' '$2 != "lo" { print $2; exit }') || true
  setup="set -e
ovl=\$(mktemp -d -p $tmp)
mount -t tmpfs rverbs-ucx \$ovl
mkdir -p \$ovl/du \$ovl/dw \$ovl/su \$ovl/sw
mount -t overlay rverbs-dev -o lowerdir=/dev,upperdir=\$ovl/du,workdir=\$ovl/dw /dev
mkdir -p /dev/infiniband && mknod -m 666 /dev/infiniband/uverbs0 c 1 3
mount -t overlay rverbs-sys -o lowerdir=/sys/class,upperdir=\$ovl/su,workdir=\$ovl/sw /sys/class
d=/sys/class/infiniband/rverbs0/ports/1/gid_attrs
mkdir -p \$d/types \$d/ndevs"
  while read -r idx gid type; do
    case $gid in
      ::ffff:*) ndev=$("$@" ip -o -4 addr </dev/null | awk -v a="${gid#::ffff:}" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }') ;;
      fe80:*) ndev=${first_if%@*} ;;
      *) ndev=$("$@" ip -o -6 addr </dev/null | awk -v a="$gid" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }') ;;
    esac
    setup+="
echo '$type' > \$d/types/$idx
echo '${ndev:-lo}' > \$d/ndevs/$idx"
  done <<<"$gids"
  ucx_argv=(unshare -m --propagation private bash -c "$setup
exec \"\$@\"" ucx)
}
