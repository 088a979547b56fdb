#!/usr/bin/env bash
# Debian's rdmacm-utils (rdma-core 44), unmodified, against the drop-in pair
# libibverbs.so.1 + librdmacm.so.1: for each case a server (in the background) and a
# client process on this host, connected over 127.0.0.1 (or ::1) by the rdma_cm.
#
#   rping        -v -V -C 10; -S 65000; -q (self-created QP: rdma_init_qp_attr,
#                rdma_establish); over ::1
#   ucmatose     default; -c 10 -C 100; -m (migration); -t/-a (TOS, ACK timeout
#                options) -S 4000; IPv6 (-f ipv6, ::1)
#   rdma_server / rdma_client   (synchronous API: rdma_create_ep, rdma_get_request)
#   udaddy       default; -c 4 -C 20 -S 1024 (UD, SIDR)
#
# Builds the drop-in with scripts/build-dropin.sh (or takes DROPIN_DIR) and points
# RVERBS_RUNTIME_DIR at a fresh temporary directory (removed at exit with any leftover
# process), so the connection manager's port table is this run's own and the programs'
# default ports cannot collide with anything else. The client starts once the server
# listens (tests/conformance/lib/cm.bash: cm_listening); both sides are bounded by
# `timeout` (RDMACM_TIMEOUT, default 30 s), both exit codes must be 0 and each side must
# print its success line (the last ping, "return status 0", "end 0"). One
# `PASS label (s)` / `FAIL label (s): reasons` line per case (a failing case's last 20
# lines of each side on stderr), then `N passed, N failed`; exit 1 if any failed. An
# optional argument is a bash regex on the labels, e.g.
# `bash tests/conformance/rdmacm_utils.sh '^rping'`.
set -uo pipefail
cd "$(dirname "$0")/../.."
NAME=rdmacm_utils.sh
TIMEOUT=${RDMACM_TIMEOUT:-30}
filter=${1:-}

source tests/conformance/lib/cm_pairs.bash

ok='^return status 0$'
cm_case "rping" tcp 7174 \
  "rping -s -a 127.0.0.1 -v -V -C 10 -p 7174" '^server ping data: rdma-ping-9: ' \
  "rping -c -a 127.0.0.1 -v -V -C 10 -p 7174" '^ping data: rdma-ping-9: '
cm_case "rping -S 65000" tcp 7174 \
  "rping -s -a 127.0.0.1 -v -V -S 65000 -C 3 -p 7174" '^server ping data: rdma-ping-2: ' \
  "rping -c -a 127.0.0.1 -v -V -S 65000 -C 3 -p 7174" '^ping data: rdma-ping-2: '
cm_case "rping -q" tcp 7174 \
  "rping -s -q -a 127.0.0.1 -v -V -C 10 -p 7174" '^server ping data: rdma-ping-9: ' \
  "rping -c -q -a 127.0.0.1 -v -V -C 10 -p 7174" '^ping data: rdma-ping-9: '
cm_case "rping ::1" tcp 7174 \
  "rping -s -a ::1 -v -C 3 -p 7174" '^server ping data: rdma-ping-2: ' \
  "rping -c -a ::1 -v -C 3 -p 7174" '^ping data: rdma-ping-2: '
cm_case "ucmatose" tcp 7471 "ucmatose" "$ok" "ucmatose -s 127.0.0.1" "$ok"
cm_case "ucmatose -c 10 -C 100" tcp 7471 \
  "ucmatose -c 10 -C 100" "$ok" "ucmatose -s 127.0.0.1 -c 10 -C 100" "$ok"
cm_case "ucmatose -m" tcp 7471 "ucmatose -m -c 3" "$ok" "ucmatose -s 127.0.0.1 -m -c 3" "$ok"
cm_case "ucmatose -t 32 -a 14 -S 4000" tcp 7471 \
  "ucmatose -t 32 -a 14 -S 4000 -C 20" "$ok" \
  "ucmatose -s 127.0.0.1 -t 32 -a 14 -S 4000 -C 20" "$ok"
cm_case "ucmatose ipv6" tcp 7471 \
  "ucmatose -f ipv6 -b ::1" "$ok" "ucmatose -f ipv6 -s ::1" "$ok"
cm_case "rdma_server/rdma_client" tcp 7471 \
  "rdma_server" '^rdma_server: end 0$' "rdma_client -s 127.0.0.1" '^rdma_client: end 0$'
cm_case "udaddy" udp 7174 "udaddy" "$ok" "udaddy -s 127.0.0.1" "$ok"
cm_case "udaddy -c 4 -C 20 -S 1024" udp 7174 \
  "udaddy -c 4 -C 20 -S 1024" "$ok" "udaddy -s 127.0.0.1 -c 4 -C 20 -S 1024" "$ok"

cm_finish
