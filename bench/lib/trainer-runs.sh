# Sourced by the benches that run tj-trainer on this machine (from the repository root).
# shellcheck shell=bash

# pick_trainer DIR: sets TRAINER to the tj-trainer users run, the CPU image's binary (`make
# images`) copied into DIR with bench/image_speed/copy-trainer.sh, else to $TRAINER as given or
# the host build build/bin/tj-trainer; trainer_origin says which, for the results.
# shellcheck disable=SC2034  # trainer_origin is the caller's
pick_trainer() {
  local dir=$1 version image
  version=$(sed -n 's/^project([^ ]* VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
  image=localhost/tj-trainer-cpu:$version
  if [ -z "${TRAINER:-}" ] &&
      bash bench/image_speed/copy-trainer.sh "$image" "$dir/tj-trainer" 2>/dev/null; then
    TRAINER=$dir/tj-trainer
    trainer_origin="the image's binary ($image, copied out with bench/image_speed/copy-trainer.sh)"
  else
    TRAINER=${TRAINER:-build/bin/tj-trainer}
    trainer_origin="$TRAINER"
  fi
  [ -x "$TRAINER" ] || { echo "no $TRAINER: make build (or make images)" >&2; return 1; }
}

# port: a free loopback port.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# tfc PORT0 PORT1 INDEX: the TF_CONFIG of worker INDEX of two workers on loopback.
tfc() { echo "{\"cluster\":{\"worker\":[\"localhost:$1\",\"localhost:$2\"]},\"task\":{\"type\":\"worker\",\"index\":$3}}"; }
