#!/usr/bin/env bash
# Real text for the dedup tests and benchmarks (tests/dedup, benchmarks/bench_minhash.py,
# benchmarks/bench_near_dedup.py): Debian's debian-handbook (one book in 26 partly translated locales:
# natural near duplicates) and python3.11-doc. Idempotent; fast when both are installed.
set -euo pipefail

PACKAGES=(debian-handbook python3.11-doc)
missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install_dedup_testdata: ${PACKAGES[*]} present"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
for _ in 1 2 3 4 5; do
    if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 install -y -q \
            --no-install-recommends "${missing[@]}"; then
        exit 0
    fi
    echo "install_dedup_testdata: apt-get install failed, running apt-get update and retrying in 5 s" >&2
    $SUDO apt-get -o DPkg::Lock::Timeout=60 update -q || true
    sleep 5
done
exit 1
