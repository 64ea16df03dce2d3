#!/usr/bin/env bash
# Install what peerwatch needs into ./.venv; with --services also the Debian packages the tests start
# (VictoriaMetrics, Prometheus, node_exporter, Alertmanager, PostgreSQL, Chromium for the dashboard tests,
# openssl for the TLS test certificates, systemd-analyze to verify the units). Idempotent: only what is missing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# --demo: only what `peerwatch demo` runs (the `serve` extra); otherwise everything the tests need (`dev`).
extras=dev
[[ "${1:-}" == "--demo" ]] && extras=serve

if [[ "${1:-}" == "--services" ]]; then
  need=()
  for pair in victoria-metrics:/usr/bin/victoria-metrics prometheus:/usr/bin/prometheus \
              prometheus-node-exporter:/usr/bin/prometheus-node-exporter \
              prometheus-alertmanager:/usr/bin/prometheus-alertmanager chromium:/usr/bin/chromium \
              openssl:/usr/bin/openssl systemd:/usr/bin/systemd-analyze \
              'postgresql:/usr/lib/postgresql/*/bin/postgres'; do
    # A path may be a glob (PostgreSQL's binaries live under its major version): the last match counts.
    found=(${pair#*:})
    [[ -x "${found[-1]}" ]] || need+=("${pair%%:*}")
  done
  if ((${#need[@]})); then
    echo "installing Debian packages: ${need[*]}"
    SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
fi

PY=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
stamp=.venv/.peerwatch-installed-$extras
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  # pip's own chatter goes to a log, shown only when the install fails.
  if ! .venv/bin/python -m pip install -q -e ".[$extras]" > .venv/pip.log 2>&1; then
    cat .venv/pip.log >&2
    exit 1
  fi
  touch "$stamp"
fi
