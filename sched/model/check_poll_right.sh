#!/usr/bin/env bash
# Model-checks why release_poll_right() stores the poll right seq_cst (poll_right_release.pml,
# see its top comment): with the seq_cst store the D0 handshake must pass; with a release store
# (-DRELEASE_STORE) spin must find a parker asleep with the right free and nobody woken.
# Needs only spin and a C compiler (CC, default cc). pan's files go to a temporary directory.
set -euo pipefail
cd "$(dirname "$0")"

command -v spin >/dev/null || {
  echo "check_poll_right.sh: spin not found (scripts/install-deps.sh installs it)" >&2
  exit 1
}
CC=${CC:-cc}
model=$PWD/poll_right_release.pml
work=$(mktemp -d "${TMPDIR:-/tmp}/poll_right.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

# check <expected errors> <name> [spin -D flags]
status=0
check() {
  local expect=$1 name=$2
  shift 2
  spin -a "$@" "$model" >spin.out 2>&1 && "$CC" -O0 -w -o pan pan.c >cc.out 2>&1 &&
    ./pan >pan.out 2>&1 || true
  local errors
  errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.out 2>/dev/null | tail -n 1)
  if [[ ${errors:-?} == "$expect" ]]; then
    echo "PASS  $name (errors: $errors, as expected)"
  else
    echo "FAIL  $name (errors: ${errors:-none}, expected $expect)"
    status=1
  fi
}

check 0 "release_poll_right, seq_cst store: the parker takes the right or is woken"
check 1 "release_poll_right, release store: the model must find the stranded parker" \
  -DRELEASE_STORE
exit $status
