#!/usr/bin/env bash
# Independent reference implementations ("oracles") for the preprocess tests, in venvs of their own
# (they pin versions that clash with the main venv and with each other):
#   .venv-oracles: datatrove (+ spaCy, its default English word tokenizer) and pygount
#   .venv-dolma:   dolma (boto3==1.26.161 stops pip's resolver loop)
# Idempotent: a stamp file per venv makes a second run instant.
set -euo pipefail
cd "$(dirname "$0")/.."
setup() {
  local venv=$1; shift
  [ -f "$venv/.stamp-v2" ] && return 0
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
  touch "$venv/.stamp-v2"
}
setup .venv-oracles "datatrove==0.10.1" spacy "pygount==3.2.0"
setup .venv-dolma "dolma[code]==1.2.1" "boto3==1.26.161"
