#!/usr/bin/env bash
# Set up, then run peerwatch on its embedded default: a simulated 16-node cluster with an NVLink
# fault, watched live (no external service needed). Ctrl-C stops. Extra arguments go to `peerwatch demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --demo
exec .venv/bin/peerwatch demo "$@"
