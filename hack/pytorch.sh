#!/usr/bin/env bash
# PyTorch for the benches, as a user installs it (`pip install torch`: PyPI's build, which
# carries CUDA's libraries and runs on the CPU without a GPU), from one pinned list
# (bench/pytorch/requirements.txt), downloaded once (about 3 GB of wheels):
#
#   hack/pytorch.sh wheels   download the wheels of the list (once; CPython 3.11, x86-64 Linux)
#                            and print their directory
#   hack/pytorch.sh venv     a virtual environment of Debian's python3 with the list installed
#                            offline from those wheels; prints its python
#   hack/pytorch.sh python   print the venv's python if it is complete, else exit 1
#
# Both live in ${TJ_CACHE_DIR:-~/.cache/tj-operator}, named after the SHA-256 of its pins
# (hack/lib/pinned-venv.sh). No test needs it; the benches that compare with PyTorch do.
#
# To regenerate the list for another PyTorch: `pip download --only-binary=:all:
# --python-version 3.11 torch==X numpy` into an empty directory and write one name==version
# line per wheel.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV_NAME=pytorch
VENV_LIST=$REPO_ROOT/bench/pytorch/requirements.txt
VENV_IMPORTS='import torch, numpy'
# shellcheck source=hack/lib/pinned-venv.sh
source "$REPO_ROOT/hack/lib/pinned-venv.sh"
pinned_venv_main "$@"
