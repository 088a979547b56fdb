#!/usr/bin/env bash
# A Linux guest with the kernel's Soft-RoCE (rdma_rxe), reachable from the host over a
# plain L2 tap link inside a network namespace: the real rxe peer for rverbs' RoCEv2
# interop tests.
#
#   vm.sh prepare        download + unpack Debian 12's QEMU, kernel and busybox into the
#                        cache (idempotent) and build the initramfs
#   vm.sh start          netns + tap, boot the guest in the background, wait until rxe0
#                        is ACTIVE with a RoCE v2 GID for the guest address
#   vm.sh run CMD...     run CMD in the guest (as root, cwd /tmp); prints its stdout and
#                        stderr, exits with its status (137: killed after
#                        RVERBS_VM_RUN_TIMEOUT s; 124: no answer from the guest)
#   vm.sh env            shell assignments describing the running guest (eval them)
#   vm.sh status         exit 0 if the guest is running
#   vm.sh console        print the guest's serial console so far
#   vm.sh stop           kill the guest, delete the netns and the tap (idempotent)
#
# How it works. The host is Debian 12 with the host kernel lacking RDMA, so the guest runs
# Debian's own 6.1 kernel under QEMU/TCG (KVM is not usable here) but the HOST's userspace:
# the host's / is exported read-only over virtio-9p and the guest chroots into it, so every
# tool installed on the host (ibverbs-utils, perftest, rdmacm-utils, rdma, this repository,
# ...) runs in the guest unchanged. The initramfs is busybox plus the needed modules; its
# /init loads them, mounts the host root with tmpfs on /tmp, /run, /var/tmp, /dev/shm (so
# the host's files there are NOT visible), configures eth0, adds rxe0 and serves commands.
#
# 9p caching: the host root is mounted cache=loose (4x faster program start-up under TCG),
# so a host file changed after the guest read it can stay stale in the guest. Directories
# in RVERBS_VM_FRESH (default: this repository and $CARGO_TARGET_DIR) are separate exports
# mounted cache=none over the same paths: always current, and visible even under /tmp.
#
# Command channel: `run` writes the command as a bash script to ID.cmd in a host directory
# ($STATE/chan, a second, writable 9p share seen in the guest as /run/rvx) and then the
# line "ID TIMEOUT" to a virtio-serial port (QEMU pipe chardev $STATE/cmd.in). The guest
# blocks reading that port (no polling), runs the script in the chroot, detached, with
# stdout/stderr to ID.out / ID.err, and last renames ID.rc.tmp to ID.rc, which the host
# waits for. Commands run concurrently (a server started by one `run` and a client by
# another work); each is killed (status 137) after RVERBS_VM_RUN_TIMEOUT seconds in the
# guest, and the host gives up (status 124) 30 s later. Files written by guest commands
# to /run/rvx appear on the host in $STATE/chan.
#
# Network: netns $NETNS holds tap $TAP = $HOST_IP/24; QEMU runs inside the netns and the
# guest's eth0 (virtio-net) is $GUEST_IP/24. No NAT, no bridge: RoCEv2's ICRC covers the IP
# addresses, so the link must be plain L2. Host-side peers run with `ip netns exec $NETNS`.
#
# Knobs (environment): RVERBS_VM_CACHE (/var/cache/rverbs-vm), RVERBS_VM_STATE
# (/run/rverbs-vm), RVERBS_VM_NETNS (rvx-host), RVERBS_VM_TAP (rvx-tap0), RVERBS_VM_HOST_IP
# (10.77.0.1), RVERBS_VM_GUEST_IP (10.77.0.2), RVERBS_VM_CPUS (2), RVERBS_VM_MEM (1024, MiB),
# RVERBS_VM_BOOT_TIMEOUT (180 s), RVERBS_VM_SILENT_TIMEOUT (90 s: a guest whose console is
# still empty then is booted once more), RVERBS_VM_RUN_TIMEOUT (300 s), RVERBS_VM_9P_CACHE (loose;
# none: slower, never stale), RVERBS_VM_FRESH (space-separated directories, see above),
# RVERBS_VM_KERNEL_PKG (default: what Debian's linux-image-amd64 depends on).
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
CACHE=${RVERBS_VM_CACHE:-/var/cache/rverbs-vm}
STATE=${RVERBS_VM_STATE:-/run/rverbs-vm}
NETNS=${RVERBS_VM_NETNS:-rvx-host}
TAP=${RVERBS_VM_TAP:-rvx-tap0}
HOST_IP=${RVERBS_VM_HOST_IP:-10.77.0.1}
GUEST_IP=${RVERBS_VM_GUEST_IP:-10.77.0.2}
CPUS=${RVERBS_VM_CPUS:-2}
MEM=${RVERBS_VM_MEM:-1024}
BOOT_TIMEOUT=${RVERBS_VM_BOOT_TIMEOUT:-180}
SILENT_TIMEOUT=${RVERBS_VM_SILENT_TIMEOUT:-90}
RUN_TIMEOUT=${RVERBS_VM_RUN_TIMEOUT:-300}
P9_CACHE=${RVERBS_VM_9P_CACHE:-loose}
# Host directories the guest sees uncached (cache=none), each a 9p export of its own mounted
# over the same path: files rebuilt on the host after boot are seen at once there, and a
# directory under the host's /tmp (hidden by the guest's tmpfs) is visible. Default: this
# repository and $CARGO_TARGET_DIR.
REPO_TOP=$(git -C "$(dirname "$SELF")" rev-parse --show-toplevel 2>/dev/null || true)
FRESH=${RVERBS_VM_FRESH-$REPO_TOP ${CARGO_TARGET_DIR:-}}

ROOT=$CACHE/root          # every downloaded .deb unpacked here (never into the host's /)
DEBS=$CACHE/debs
INITRAMFS=$CACHE/initramfs.cpio
CHAN=$STATE/chan
FAIL_MARKER=RVX-FAILED

# Host packages whose programs the guest runs (through the shared root) or the smoke test
# needs. libibverbs1 + ibverbs-providers carry the rxe provider (librxe-rdmav34.so).
HOST_PKGS=(ibverbs-utils ibverbs-providers libibverbs1 librdmacm1 rdmacm-utils perftest
    rdma-core iproute2 python3)
# Unpacked, not installed: Debian 12's QEMU 7.2 conflicts with a backported qemu-utils.
QEMU_PKGS=(qemu-system-x86 qemu-system-data seabios busybox-static)
# qemu-system-common carries the TCG accelerator as a loadable module
# (usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so, libc only): unpacked, but its
# dependencies (spice, audio, usb, ... for other modules) are not followed.
QEMU_NODEPS_PKGS=(qemu-system-common)
# Not needed: the NIC option ROMs (ipxe-qemu; virtio-net-pci gets romfile= because the guest
# boots with -kernel), the GUI and the utilities.
SKIP_PKGS=" qemu-system-common ipxe-qemu qemu-system-gui qemu-utils "
# Top-level guest modules; their dependencies are added from each module's depends=.
# crc32_generic: rxe 6.1 asks the crypto API for "crc32" (ICRC) when rxe0 is created, and the
# guest has no modprobe to load it on demand.
GUEST_MODULES=(virtio_pci virtio_net virtio_console 9pnet_virtio 9p crc32_generic rdma_rxe
    ib_uverbs rdma_ucm ib_umad)

log() { printf 'vm.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------- prepare ---

APT_UPDATED=
apt_update() {
    [ -z "$APT_UPDATED" ] || return 0
    log "apt-get update"
    apt-get update -q >/dev/null
    APT_UPDATED=1
}

installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }

# The package's hard dependencies (first alternative of each), one per line.
depends_of() {
    apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "$1" |
        awk '$1 == "Depends:" || $1 == "|Depends:" { if (!alt) print $2; alt = ($1 == "|Depends:") }' |
        grep -v '^<' || true
}

# Download $1 into $DEBS unless a .deb of it is there already; unpack it into $ROOT once.
fetch_unpack() {
    local pkg=$1 deb
    deb=$(ls "$DEBS/${pkg}"_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then
        # Stale lists name versions the mirror no longer has: update once and retry.
        (cd "$DEBS" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
            { apt_update && (cd "$DEBS" && apt-get download -q "$pkg" >/dev/null 2>&1); } ||
            die "apt-get download $pkg failed"
        deb=$(ls "$DEBS/${pkg}"_*.deb 2>/dev/null | head -n1 || true)
        [ -n "$deb" ] || die "apt-get download $pkg left no .deb"
        log "downloaded $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
    fi
    if [ ! -e "$deb.unpacked" ]; then
        dpkg-deb -x "$deb" "$ROOT"
        touch "$deb.unpacked"
    fi
}

cmd_prepare() {
    local t0=$SECONDS
    mkdir -p "$DEBS" "$ROOT"
    local missing=() p
    for p in "${HOST_PKGS[@]}"; do installed "$p" || missing+=("$p"); done
    # apt-cache needs package lists (fetch_unpack refreshes them once if a download fails).
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' 2>/dev/null | head -n1)" ]; then
        apt_update
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing host packages: ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    fi

    # Once every package is unpacked, the list of them is kept: later runs skip the
    # resolution (about 1 s per apt-cache call). Delete the cache to pick up new versions.
    if [ -s "$CACHE/packages" ]; then
        log "packages already unpacked in $ROOT (list: $CACHE/packages)"
    else
        resolve_and_unpack
    fi

    # Every library QEMU links against must now resolve.
    local nf
    nf=$(LD_LIBRARY_PATH=$(qemu_libpath) ldd "$ROOT/usr/bin/qemu-system-x86_64" \
        "$ROOT/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so" | grep 'not found' || true)
    [ -z "$nf" ] || die "qemu-system-x86_64 still misses libraries: $nf"
    qemu --version | head -n1 >&2
    build_initramfs
    log "prepare done in $((SECONDS - t0)) s (cache $CACHE, $(du -sh "$CACHE" | cut -f1))"
}

resolve_and_unpack() {
    local p
    # The kernel: the image Debian's linux-image-amd64 meta package points at.
    local kpkg=${RVERBS_VM_KERNEL_PKG:-}
    if [ -z "$kpkg" ]; then
        kpkg=$(depends_of linux-image-amd64 | grep '^linux-image-' | head -n1)
        [ -n "$kpkg" ] || die "cannot resolve linux-image-amd64"
    fi
    # QEMU + the shared libraries it needs that the host lacks, to a fixed point.
    local -A want=() seen=()
    local queue=("${QEMU_PKGS[@]}") dep
    while [ ${#queue[@]} -gt 0 ]; do
        p=${queue[0]}; queue=("${queue[@]:1}")
        [ -z "${seen[$p]:-}" ] || continue
        seen[$p]=1
        want[$p]=1
        for dep in $(depends_of "$p"); do
            dep=${dep%%:*}
            case $SKIP_PKGS in *" $dep "*) continue ;; esac
            installed "$dep" || queue+=("$dep")
        done
    done
    for p in "${QEMU_NODEPS_PKGS[@]}"; do want[$p]=1; done
    log "unpacking into $ROOT: $kpkg ${!want[*]}"
    fetch_unpack "$kpkg"
    for p in "${!want[@]}"; do fetch_unpack "$p"; done
    printf '%s\n' "$kpkg" "${!want[@]}" > "$CACHE/packages.tmp"
    mv "$CACHE/packages.tmp" "$CACHE/packages"
}

qemu_libpath() { echo "$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/lib/x86_64-linux-gnu"; }
# QEMU_MODULE_DIR: QEMU looks for its modules (accel-tcg) under the packaged /usr path.
QEMU_ENV=("LD_LIBRARY_PATH=$(qemu_libpath)" "QEMU_MODULE_DIR=$ROOT/usr/lib/x86_64-linux-gnu/qemu")
qemu() { env "${QEMU_ENV[@]}" "$ROOT/usr/bin/qemu-system-x86_64" "$@"; }

kernel_version() {
    local v
    v=$(ls "$ROOT/lib/modules" 2>/dev/null | sort -V | tail -n1)
    [ -n "$v" ] || die "no kernel unpacked in $ROOT; run: $0 prepare"
    echo "$v"
}

# The initramfs: busybox, the modules (dependency order in /etc/rvx-modules) and /init.
build_initramfs() {
    local kver kdir tmp
    kver=$(kernel_version)
    kdir=$ROOT/lib/modules/$kver
    tmp=$(mktemp -d "$CACHE/initramfs.XXXXXX")
    mkdir -p "$tmp"/{bin,dev,proc,sys,newroot,etc,lib/modules}
    cp "$ROOT/bin/busybox" "$tmp/bin/busybox"

    # name -> path of every module (file names may use '-' where the module name has '_').
    local -A path_of=() done_mod=()
    local f n
    while IFS= read -r f; do
        n=${f##*/}; n=${n%.ko}; n=${n//-/_}
        path_of[$n]=$f
    done < <(find "$kdir/kernel" -name '*.ko')
    local order=()
    # Depth-first, dependencies first (the depends= string of the .modinfo section; the
    # host has no kmod, and busybox's modinfo wants a modules.dep).
    add_module() {
        local m=$1 d deps
        [ -z "${done_mod[$m]:-}" ] || return 0
        done_mod[$m]=1
        [ -n "${path_of[$m]:-}" ] || die "module $m not found under $kdir (built in?)"
        deps=$(tr '\0' '\n' < "${path_of[$m]}" | grep -a '^depends=' | head -n1 | cut -d= -f2)
        for d in ${deps//,/ }; do add_module "$d"; done
        order+=("$m")
    }
    for n in "${GUEST_MODULES[@]}"; do add_module "$n"; done
    for n in "${order[@]}"; do
        cp "${path_of[$n]}" "$tmp/lib/modules/$n.ko"
        echo "$n" >> "$tmp/etc/rvx-modules"
    done
    guest_init > "$tmp/init"
    chmod 755 "$tmp/init"
    (cd "$tmp" && find . | LC_ALL=C sort | "$tmp/bin/busybox" cpio -o -H newc 2>/dev/null) > "$INITRAMFS.tmp"
    mv "$INITRAMFS.tmp" "$INITRAMFS"
    rm -rf "$tmp"
    log "initramfs $INITRAMFS ($(du -k "$INITRAMFS" | cut -f1) KiB): modules ${order[*]}"
}

# The guest's /init (busybox ash, PID 1). Parameters come from the kernel command line
# (rvx.ip=, rvx.timeout=). Everything it prints goes to the serial console.
guest_init() {
    cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

stamp() { echo "rvx: $(cut -d' ' -f1 /proc/uptime) s: $*"; }
fail() {
    echo "RVX-FAILED: $*"
    poweroff -f
}

ip_cidr= cache=none fresh=
for a in $(cat /proc/cmdline); do
    case $a in
        rvx.ip=*) ip_cidr=${a#rvx.ip=} ;;
        rvx.cache=*) cache=${a#rvx.cache=} ;;
        rvx.fresh=*) fresh=${a#rvx.fresh=} ;;
    esac
done
[ -n "$ip_cidr" ] || fail "no rvx.ip= on the kernel command line"

stamp "init started"
for m in $(cat /etc/rvx-modules); do
    insmod /lib/modules/$m.ko || fail "insmod $m"
done
stamp "modules loaded"

# The host's / read-only (cache mode: see RVERBS_VM_9P_CACHE in vm.sh). msize: larger
# messages, fewer round trips.
R=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=$cache,ro hostroot $R ||
    fail "mount hostroot"
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
# debugfs: dynamic debug, e.g. echo 'module rdma_rxe +p' > /sys/kernel/debug/dynamic_debug/control
mount -t debugfs debugfs $R/sys/kernel/debug 2>/dev/null || true
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=1777 tmpfs $R/var/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/dev/pts $R/dev/shm $R/run/rvx $R/run/lock
mount -t devpts devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
# The command directory: always uncached, both sides write it.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none rvxchan $R/run/rvx ||
    fail "mount rvxchan"
# Uncached exports of single host directories over their paths (rvx.fresh=DIR,DIR...).
i=0
for d in $(echo "$fresh" | tr , ' '); do
    mkdir -p $R$d 2>/dev/null
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none,ro rvxfresh$i $R$d ||
        fail "mount rvxfresh$i on $d"
    i=$((i + 1))
done
stamp "file systems mounted (host root cache=$cache, uncached: ${fresh:-none})"

# Network: eth0 is the virtio-net NIC on the host's tap.
ip link set lo up
ip addr add "$ip_cidr" dev eth0 || fail "address eth0"
ip link set eth0 up || fail "eth0 up"

ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TERM=dumb LANG=C.UTF-8"
chroot $R /usr/bin/env -i $ENV rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
stamp "rxe0 added"

# Ready = port ACTIVE and a RoCE v2 GID for our IPv4 address (the GID table fills
# asynchronously after the address and the link are up). Bounded: 60 s.
addr=${ip_cidr%/*}
pat=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo $addr | tr . ' '))
P=/sys/class/infiniband/rxe0/ports/1
gid_index=
i=0
while [ $i -lt 600 ]; do
    if grep -q ACTIVE $P/state 2>/dev/null; then
        for g in $(grep -l "^$pat\$" $P/gids/* 2>/dev/null); do
            n=${g##*/}
            [ "$(cat $P/gid_attrs/types/$n 2>/dev/null)" = "RoCE v2" ] && gid_index=$n && break
        done
    fi
    [ -n "$gid_index" ] && break
    i=$((i + 1))
    sleep 0.1
done
[ -n "$gid_index" ] || fail "rxe0 not ACTIVE with a RoCE v2 GID for $addr"

# The command port: a virtio-serial port named rvx.cmd (no udev here: find it by name).
port=
for n in /sys/class/virtio-ports/*; do
    [ "$(cat $n/name 2>/dev/null)" = rvx.cmd ] && port=/dev/${n##*/}
done
[ -n "$port" ] || fail "no virtio-serial port rvx.cmd"

# The server reads "ID TIMEOUT" lines from the port (blocking: no polling) and runs
# /run/rvx/ID.cmd in the chroot, detached (a double fork: its parent returns at once and
# PID 1 reaps it), writing ID.out, ID.err and, last, ID.rc.
cat > /serve <<SERVE
C=$R/run/rvx
run_one() {
    timeout -s KILL "\$2" chroot $R /usr/bin/env -i $ENV /bin/bash /run/rvx/\$1.cmd \\
        > \$C/\$1.out 2> \$C/\$1.err < /dev/null
    echo \$? > \$C/\$1.rc.tmp
    mv \$C/\$1.rc.tmp \$C/\$1.rc
}
while :; do
    while read -r id t; do
        case \$id in *[!0-9a-zA-Z._-]*|'') continue ;; esac
        ( run_one "\$id" "\${t:-300}" & )
    done < $port
done
SERVE
sh /serve &
echo "$gid_index" > $R/run/rvx/ready.tmp && mv $R/run/rvx/ready.tmp $R/run/rvx/ready
stamp "RVX-READY rxe0 gid_index=$gid_index ip=$ip_cidr"
# PID 1 only waits, which also reaps the orphaned command processes.
while :; do wait; sleep 1; done
INIT
}

# ------------------------------------------------------------------------------ start ---

qemu_pid() { cat "$STATE/qemu.pid" 2>/dev/null || true; }
running() {
    local pid
    pid=$(qemu_pid)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# Starts QEMU in the background (daemonized) inside the netns; called by cmd_start, whose
# locals `fresh_args` and `fresh_list` it reads (bash's dynamic scope).
launch_qemu() {
    rm -f "$STATE/console.log" "$STATE/qemu.pid"
    # TCG: KVM aborts on an MSR with a stock kernel on these machines. -cpu max: every
    # feature TCG can emulate, so host binaries built for newer x86-64 levels still run.
    # -no-reboot + panic=-1: a guest panic or a failed init ends QEMU at once.
    ip netns exec "$NETNS" env "${QEMU_ENV[@]}" \
        "$ROOT/usr/bin/qemu-system-x86_64" \
        -accel tcg -cpu max -smp "$CPUS" -m "$MEM" -M pc \
        -L "$ROOT/usr/share/qemu" -L "$ROOT/usr/share/seabios" \
        -nodefaults -no-user-config -display none -vga none -no-reboot \
        -kernel "$ROOT/boot/vmlinuz-$kver" -initrd "$INITRAMFS" \
        -append "console=ttyS0 loglevel=4 panic=-1 rvx.ip=$GUEST_IP/24 rvx.cache=$P9_CACHE rvx.fresh=$fresh_list" \
        -serial "file:$STATE/console.log" \
        -fsdev "local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap" \
        -device virtio-9p-pci,fsdev=fsroot,mount_tag=hostroot \
        -fsdev "local,id=fschan,path=$CHAN,security_model=none" \
        -device virtio-9p-pci,fsdev=fschan,mount_tag=rvxchan \
        "${fresh_args[@]}" \
        -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" \
        -device virtio-net-pci,netdev=n0,romfile= \
        -chardev "pipe,id=cmd,path=$STATE/cmd" \
        -device virtio-serial-pci -device virtserialport,chardev=cmd,name=rvx.cmd \
        -pidfile "$STATE/qemu.pid" -daemonize
}

# Ends the QEMU process (not the netns or the state directory).
kill_qemu() {
    local pid i
    pid=$(qemu_pid)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
}

cmd_start() {
    local t0=$SECONDS kver
    running && die "a guest is already running (pid $(qemu_pid)); run: $0 stop"
    kver=$(kernel_version)
    [ -e "$INITRAMFS" ] || die "no initramfs; run: $0 prepare"
    # The init script lives in this file: rebuild the initramfs when this file is newer.
    [ "$SELF" -ot "$INITRAMFS" ] || build_initramfs
    cmd_stop_quiet
    mkdir -p "$CHAN"
    # The command port's host end: QEMU's pipe chardev reads $STATE/cmd.in (host -> guest)
    # and writes $STATE/cmd.out (unused); QEMU opens both read-write, so they never block.
    mkfifo "$STATE/cmd.in" "$STATE/cmd.out"
    # Undo everything on failure; on success the guest stays up until `stop`.
    trap 'rc=$?; if [ $rc -ne 0 ]; then log "start failed; console tail:"; tail -n 30 "$STATE/console.log" >&2 || true; cmd_stop_quiet; fi' EXIT

    ip netns add "$NETNS"
    ip -n "$NETNS" link set lo up
    ip -n "$NETNS" tuntap add dev "$TAP" mode tap
    ip -n "$NETNS" addr add "$HOST_IP/24" dev "$TAP"
    ip -n "$NETNS" link set "$TAP" up

    # The uncached directories: absolute, existing, no spaces or commas (kernel command line).
    local fresh_args=() fresh_list='' d x i=0
    # Sorted, so a directory is mounted before one inside it.
    for d in $(for x in $FRESH; do readlink -f "$x" || true; done | sort -u); do
        [ -d "$d" ] && [ "$d" != / ] || continue
        case $d in *,*) die "RVERBS_VM_FRESH: no commas in $d" ;; esac
        fresh_args+=(-fsdev "local,id=fsfresh$i,path=$d,security_model=none,readonly=on,multidevs=remap"
            -device "virtio-9p-pci,fsdev=fsfresh$i,mount_tag=rvxfresh$i")
        fresh_list=${fresh_list:+$fresh_list,}$d
        i=$((i + 1))
    done

    launch_qemu

    # Bounded wait for the ready file (or a failure marker / QEMU's exit). A guest that has
    # written nothing to its console by SILENT_TIMEOUT is stuck before its kernel spoke (seen
    # once in CI under TCG: an empty console for 180 s, where guests boot in ~12 s): it is
    # killed and booted once more.
    local attempt deadline silent
    for attempt in 1 2; do
        deadline=$((SECONDS + BOOT_TIMEOUT))
        silent=$((SECONDS + SILENT_TIMEOUT))
        until [ -e "$CHAN/ready" ]; do
            running || die "QEMU exited during boot"
            grep -q "$FAIL_MARKER" "$STATE/console.log" 2>/dev/null && die "guest init failed"
            [ $SECONDS -lt $deadline ] || die "guest not ready after $BOOT_TIMEOUT s"
            if [ "$attempt" = 1 ] && [ $SECONDS -ge $silent ] && [ ! -s "$STATE/console.log" ]; then
                log "guest silent after $SILENT_TIMEOUT s (empty console): booting it again"
                kill_qemu
                launch_qemu
                continue 2
            fi
            sleep 0.2
        done
        break
    done
    trap - EXIT
    log "guest ready in $((SECONDS - t0)) s: rxe0 on $GUEST_IP, RoCE v2 gid index $(cat "$CHAN/ready")"
    log "host side: netns $NETNS, $TAP = $HOST_IP (ip netns exec $NETNS CMD)"
    log "guest: $0 run CMD...   console: $STATE/console.log   stop: $0 stop"
}

# ------------------------------------------------------------------------------- run ---

cmd_run() {
    [ $# -gt 0 ] || die "usage: $0 run CMD [ARG...]"
    running || die "no guest running; run: $0 start"
    local id tmo=$RUN_TIMEOUT
    id=$(date +%s%N).$$.$RANDOM
    # The script (bash: %q quoting), then its id and time limit on the command port; a
    # line shorter than PIPE_BUF is written whole, so concurrent `run`s do not mix.
    {
        echo "cd /tmp || exit 125"
        printf '%q ' "$@"
        echo
    } > "$CHAN/$id.cmd"
    timeout 10 bash -c 'printf "%s %s\n" "$1" "$2" > "$3"' _ "$id" "$tmo" "$STATE/cmd.in" ||
        die "cannot write the command port"
    local deadline=$((SECONDS + tmo + 30)) rc
    until [ -e "$CHAN/$id.rc" ]; do
        if ! running || [ $SECONDS -ge $deadline ]; then
            log "no answer from the guest for: $*"
            cat "$CHAN/$id.out" 2>/dev/null || true
            cat "$CHAN/$id.err" >&2 2>/dev/null || true
            rm -f "$CHAN/$id".*
            return 124
        fi
        sleep 0.05
    done
    rc=$(cat "$CHAN/$id.rc")
    cat "$CHAN/$id.out"
    cat "$CHAN/$id.err" >&2
    rm -f "$CHAN/$id".*
    return "$rc"
}

# ------------------------------------------------------------------------ stop, misc ---

cmd_stop_quiet() {
    kill_qemu
    if ip netns list | grep -qw "^$NETNS"; then ip netns delete "$NETNS"; fi
    rm -rf "$STATE"
}

cmd_stop() { cmd_stop_quiet; log "stopped"; }

cmd_env() {
    running || die "no guest running"
    cat <<EOF
RVX_NETNS=$NETNS
RVX_TAP=$TAP
RVX_HOST_IP=$HOST_IP
RVX_GUEST_IP=$GUEST_IP
RVX_GID_INDEX=$(cat "$CHAN/ready")
RVX_CHAN=$CHAN
EOF
}

case ${1:-} in
    prepare) shift; cmd_prepare "$@" ;;
    start) shift; cmd_start "$@" ;;
    run) shift; cmd_run "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    env) shift; cmd_env ;;
    status) running ;;
    console) cat "$STATE/console.log" ;;
    *) sed -n '2,16p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
