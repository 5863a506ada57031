#!/usr/bin/env bash
# Independent reference implementations ("oracles") for the preprocess tests, in venvs of their own
# (they pin versions that clash with the main venv and with each other):
#   .venv-oracles: datatrove (+ spaCy, its default English word tokenizer; regex, which it imports
#                  without declaring), pygount, and tokenizers (datatrove's DocumentTokenizer, in
#                  benchmarks/bench_tokenize.py)
#   .venv-dolma:   dolma[code] (boto3==1.26.161 stops pip's resolver loop)
#   .venv-streaming: mosaicml-streaming (tests/export: its StreamingDataset reads the MDS export)
# Idempotent: a stamp file per venv makes a second run instant. ORACLES_DIR puts them elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${ORACLES_DIR:-.}
PY=${PYTHON:-python3}
# One builder at a time: `make test` starts this in the background and the tests call it again.
mkdir -p "$DIR"
exec 9>"$DIR/.venv-oracles.lock"
flock 9
setup() {
  local venv=$DIR/$1; shift
  [ -f "$venv/.stamp-v2" ] && return 0
  rm -rf "$venv"
  "$PY" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
  touch "$venv/.stamp-v2"
}
setup .venv-oracles "datatrove==0.10.1" spacy regex "pygount==3.2.0" "tokenizers==0.23.3"
# Added after the first venvs were built: installed into an existing one too (a no-op once there).
"$DIR/.venv-oracles/bin/python" -c "import tokenizers" 2>/dev/null \
  || "$DIR/.venv-oracles/bin/pip" install --quiet --disable-pip-version-check "tokenizers==0.23.3"
setup .venv-dolma "dolma[code]==1.2.1" "boto3==1.26.161"
# tests/export: mosaicml-streaming's StreamingDataset reads the MDS export (it pins numpy<2.2: not in the main
# venv); torch from the CPU wheel, not the CUDA one its unpinned requirement would pull
setup .venv-streaming "torch==2.13.0+cpu" "mosaicml-streaming==0.13.0"
# benchmarks/bench_langid_pii.py: datatrove's LanguageFilter wants fasttext (checked by its distribution
# name) and fasteners; added here, not in the stamp, so that existing venvs get them without a rebuild.
"$DIR/.venv-oracles/bin/python" -c "import fasttext, fasteners" 2>/dev/null ||
  "$DIR/.venv-oracles/bin/pip" install --quiet --disable-pip-version-check fasttext-numpy2-wheel fasteners
# tests/decontaminate, benchmarks/bench_decontaminate.py: datatrove hashes n-grams as str, which xxhash 4 refuses
"$DIR/.venv-oracles/bin/python" -c "import xxhash; xxhash.xxh64_intdigest('')" 2>/dev/null ||
  "$DIR/.venv-oracles/bin/pip" install --quiet --disable-pip-version-check "xxhash==3.6.0"
# benchmarks/bench_web_recipe.py: datatrove's WarcReader (warcio, cchardet, python-magic), Trafilatura (trafilatura,
# which needs lxml's html cleaner as a separate package) and its MinHash steps' JsonlWriter (orjson)
"$DIR/.venv-oracles/bin/python" -c "import warcio, cchardet, magic, trafilatura, orjson" 2>/dev/null ||
  "$DIR/.venv-oracles/bin/pip" install --quiet --disable-pip-version-check warcio faust-cchardet python-magic \
    trafilatura lxml_html_clean orjson
