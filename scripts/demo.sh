#!/usr/bin/env bash
# Set up and run peerwatch on its embedded default data (no external service needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/peerwatch catalog "$@"
