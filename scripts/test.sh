#!/usr/bin/env bash
# Everything CI checks: set-up (Python and Debian packages), ruff, mypy, then the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --services
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy
exec .venv/bin/pytest "$@"
