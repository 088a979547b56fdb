#!/bin/bash
# The "death at any instant" harness in its short mode (60 seeded rounds, capped at
# 100 s): tests/chaos/kill.py builds the drop-in (scripts/build-dropin.sh), compiles
# kill_peer.c and runs the rounds, each in its own RVERBS_RUNTIME_DIR. Arguments go to
# kill.py (e.g. --long, --seed N, --rounds N, --time-cap S); RVERBS_CHAOS_LONG=1 also
# selects the long mode.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/kill.py" "$@"
