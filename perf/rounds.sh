# Sourced by the perf/compare-* scripts (and perf/http/compare) from the repository's root.
#
# rotated ROUND NAME...: the names in the order round ROUND (1-based) runs them, each round
# starting one name further along. A fixed order gives one server the first seat in every round,
# and that seat is not neutral: in a placebo run (one binary against itself, docs/benchmarks.md)
# whichever ran first used up to 6 µs more CPU per ping-pong message in 9 of 10 rounds.
rotated() {
  local r=$1
  shift
  local names=("$@") n=$# i
  for ((i = 0; i < n; i++)); do echo "${names[$(((i + r - 1) % n))]}"; done
}
