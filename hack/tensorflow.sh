#!/usr/bin/env bash
# TensorFlow for the example image, the tests and the bench, from one pinned list
# (examples/tensorflow/requirements.txt), downloaded once:
#
#   hack/tensorflow.sh wheels   download the wheels of the list (once; CPython 3.11, x86-64
#                               Linux) and print their directory
#   hack/tensorflow.sh venv     a virtual environment of Debian's python3 (3.11, as in the
#                               image) with the list installed offline from those wheels; prints
#                               its python. Tests and the bench run TensorFlow with it.
#   hack/tensorflow.sh python   print the venv's python if it is complete, else exit 1
#
# Both live in ${TJ_CACHE_DIR:-~/.cache/tj-operator}, named after the SHA-256 of its pins, so a
# change of the list makes new ones and the old ones can be removed (hack/lib/pinned-venv.sh).
#
# To regenerate the list for another TensorFlow: `pip download --only-binary=:all:
# --python-version 3.11 tensorflow-cpu==X keras==Y tensorboard==X` into an empty directory,
# then `pip download --no-deps tf-keras==X`, and write one name==version line per wheel.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV_NAME=tensorflow
VENV_LIST=$REPO_ROOT/examples/tensorflow/requirements.txt
VENV_IMPORTS='import tensorflow, tf_keras, keras, tensorboard'
# shellcheck source=hack/lib/pinned-venv.sh
source "$REPO_ROOT/hack/lib/pinned-venv.sh"
pinned_venv_main "$@"
