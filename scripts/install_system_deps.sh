#!/usr/bin/env bash
# System packages that `make test` / `make demo` need, on Debian 12. Idempotent and fast when all are
# present: apt-get update runs once, and only when something is missing.
#
# To add a package the suite needs, append it to PACKAGES (one line, with a comment saying who needs it).
set -euo pipefail

PACKAGES=(
    python3.11-venv   # `python3.11 -m venv .venv` (Debian splits ensurepip out of python3.11)
    make
    procps            # ps/pkill used when tests stop their own servers
    slurm-wlm         # tests/backends/slurm: one-node Slurm (slurmctld, slurmd, clients) started by scripts/slurm_up.sh
    munge             # tests/backends/slurm: Slurm's authentication daemon
    openssh-server    # tests/backends/slurm: a loopback sshd as the Slurm login node (backend over SSH)
    postgresql        # tests/journey: Airflow's metadata DB for the real scheduler/api-server run
    chromium          # tests/journey: headless browser for the Airflow UI screenshots
    chromium-driver   # tests/journey: selenium drives chromium through it
    docker-compose    # tests/deploy: `docker-compose config` validates docker-compose.yaml (no Docker engine needed)
    debian-handbook   # tests/dedup, tests/preprocess/test_structure.py, benchmarks: one book in 26 partly translated locales (real near duplicates, real prose)
    python3.11-doc    # benchmarks, tests/preprocess/test_structure.py: real text (HTML pages; real index pages)
)

if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_system_deps: not a Debian-like system (no dpkg/apt-get); install these yourself: ${PACKAGES[*]}" >&2
    exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install_system_deps: all ${#PACKAGES[@]} system packages present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install_system_deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
    fi
fi

# Another apt process (unattended upgrades, a parallel install) may hold the lock: wait for it.
apt_get() {
    for _ in 1 2 3 4 5; do
        if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 "$@"; then return 0; fi
        echo "install_system_deps: apt-get $1 failed, retrying in 5 s" >&2; sleep 5
    done
    return 1
}

echo "install_system_deps: installing ${missing[*]}"
apt_get update -q
apt_get install -y -q --no-install-recommends "${missing[@]}"
