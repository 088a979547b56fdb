# Shared by lib/pairs.bash and lib/cm_pairs.bash. Sourced, not run: the run's work
# directory `WORK` (removed at exit, with any server or client still running: their pids
# in `server_pid` and `client_pid`), and the exit traps. NAME is the sourcing script's.
#
# On /dev/shm when there is one, as the device's own default runtime directory is: a
# memory filesystem, where registrations of caller memory are shareable by default
# (docs/memory.md, "Shareable registrations"); RVERBS_TEST_TMP overrides.
tmp_base=${RVERBS_TEST_TMP:-$([ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")}
WORK=$(mktemp -d "$tmp_base/rverbs-${NAME%.sh}.XXXXXX")
server_pid= client_pid=
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
