#!/usr/bin/env bash
# Model-checks the scheduler's park/notify handshake (park_notify.pml, see its top comment) and
# the ordering of the poll right's release (poll_right_release.pml):
#   - the protocol of sched/src/scheduler.cpp must pass, for 2 and 3 workers: no assertion
#     violation (no phantom searcher, no work left behind), no invalid end state (deadlock),
#     no non-progress cycle, and no truncated search;
#   - the same with the driver (-DDRIVER: the poll right, D0..D3, the reaper's wake, IO
#     completions), which must also strand no completion and keep the driver bit and the poll
#     right consistent;
#   - the old protocol (-DOLD_PROTOCOL) must fail, for 2 workers: spin must find the phantom
#     searcher (property 1) and the park/recheck livelock of the "bug 6" shape (property 3),
#     whose traces are printed;
#   - attach_driver() and detach_driver() racing with the workers must pass; as of the commit
#     that added the driver (-DBUGGY_ATTACH, -DBUGGY_DETACH) they must fail (a completion
#     stranded with every worker on the semaphore; a holder reloading a null driver_), whose
#     traces are printed;
#   - the release of the poll right and its handover (a wake by S3's rule), with items that run
#     long (-DLONG_IO, -DLONG_QUEUED) and that look into the driver first (-DLOOK_LONG), 2 and
#     3 workers (the D0, RACE and LOOK scenarios, where the model rejected the protocol of
#     "wishes" the handover replaced): the code must pass; with the handover taken out
#     (-DBUGGY_NO_HANDOVER) or the parker's right_freed recheck (-DBUGGY_NO_RIGHT_RECHECK) a
#     completion must be stranded while a worker sleeps on the semaphore;
#   - poll_right_release.pml: release_poll_right()'s store and S2 fence must pass under
#     x86-TSO; without the fence (-DNO_FENCE) the parker must be stranded;
#   - spare_start.pml: a spare counted as started before its thread runs must leave no item
#     stranded by an outside submit; counted after (-DPUBLISH_AFTER_START), it must;
#   - lifo_nudge.pml: sync::LifoSemaphore with nudge() loses nobody; two mutants must fail.
# Needs only spin and a C compiler (CC, default cc). pan's files go to a temporary directory.
# Runs MODEL_JOBS (default 2) checks at a time; pan is built with PAN_CFLAGS (default -O0:
# at these sizes compiling pan.c with -O2 costs more than the faster search gains).
set -euo pipefail
cd "$(dirname "$0")"

command -v spin >/dev/null || {
  echo "check.sh: spin not found (scripts/install-deps.sh installs it)" >&2
  exit 1
}
CC=${CC:-cc}
JOBS=${MODEL_JOBS:-2}
read -r -a PAN_CFLAGS <<<"${PAN_CFLAGS:--O0}"
DEPTH=100000  # pan -m: far above the deepest path (< 1000); a truncated search fails anyway

work=$(mktemp -d "${TMPDIR:-/tmp}/park_notify.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The interleaving of a counterexample, as the model's step-named printf lines.
show_trail() {
  spin -t "$@" "$MODEL" 2>&1 | sed -E 's/^ +//; s/ {2,}/ /g' |
    grep -E '^[wxeis][0-9]+ |START OF CYCLE|failed assertion' | tail -n 30 | sed 's/^/    /' ||
    true
}

# run_check <expect> <name> <spin -D flags> -- <cc flags> -- <pan flags>, in the current
# directory (a copy of the model): prints PASS or FAIL, the figures, and any trace.
# expect: pass, phantom (the phantom-searcher assertion), cycle (a non-progress cycle),
# stranded (the watchdog: something left when nothing can move), nulldriver (a null driver_).
run_check() {
  local expect=$1 name=$2
  shift 2
  local spin_flags=() cc_flags=() pan_flags=()
  while [[ $# -gt 0 && $1 != -- ]]; do spin_flags+=("$1"); shift; done
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do cc_flags+=("$1"); shift; done
  shift
  pan_flags=("$@")

  local ok=1 why=""
  if ! spin -a "${spin_flags[@]}" "$MODEL" >spin.out 2>&1; then
    ok=0 why="spin -a failed: $(tail -n 3 spin.out)"
  elif ! "$CC" "${PAN_CFLAGS[@]}" -w "${cc_flags[@]}" -o pan pan.c >cc.out 2>&1; then
    ok=0 why="cc failed: $(tail -n 3 cc.out)"
  else
    ./pan -m"$DEPTH" "${pan_flags[@]}" >pan.out 2>&1 || true
    local errors stored depth secs
    errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.out | tail -n 1)
    stored=$(awk '/states, stored/ { print $1 }' pan.out | tail -n 1)
    depth=$(sed -n 's/.*depth reached \([0-9][0-9]*\).*/\1/p' pan.out | tail -n 1)
    secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) seconds.*/\1/p' pan.out | tail -n 1)
    local figures="errors ${errors:-?}, ${stored:-?} states stored, depth ${depth:-?}, ${secs:-?} s"
    if [[ -z $errors ]]; then
      ok=0 why="no result from pan: $(tail -n 3 pan.out)"
    elif grep -q 'search depth too small' pan.out; then
      ok=0 why="search truncated (max search depth too small)"
    else
      case $expect in
        pass)
          [[ $errors == 0 ]] || { ok=0 why="expected no errors: $(grep -m1 '^pan:' pan.out)"; } ;;
        phantom)
          if [[ $errors == 0 ]] || ! grep -q '^pan:1: assertion violated (pending<=nasleep)' pan.out
          then ok=0 why="expected the phantom-searcher assertion to fail"; fi ;;
        cycle)
          if [[ $errors == 0 ]] || ! grep -q '^pan:1: non-progress cycle' pan.out
          then ok=0 why="expected a non-progress cycle"; fi ;;
        stranded)
          if [[ $errors == 0 ]] || ! grep -q '^pan:1: assertion violated .*io_ready==0' pan.out
          then ok=0 why="expected the watchdog to find a completion stranded"; fi ;;
        nulldriver)
          if [[ $errors == 0 ]] || ! grep -q '^pan:1: assertion violated attached' pan.out
          then ok=0 why="expected a holder to reload a null driver_"; fi ;;
        asleep)
          if [[ $errors == 0 ]] || ! grep -q '^pan:1: assertion violated .*asleep' pan.out
          then ok=0 why="expected the parker asleep with the right free"; fi ;;
        assert:*)  # a given assertion (its text as pan prints it) must fail
          if [[ $errors == 0 ]] || ! grep -qF "pan:1: assertion violated ${expect#assert:}" pan.out
          then ok=0 why="expected the assertion ${expect#assert:} to fail"; fi ;;
      esac
    fi
    why="${why:-$figures}"
    [[ $ok == 1 ]] || why="$why ($figures)"
  fi
  if [[ $ok == 1 ]]; then
    echo "PASS $name: $why"
  else
    echo "FAIL $name: $why"
  fi
  if [[ -f $MODEL.trail ]]; then  # a counterexample, expected or not
    echo "    trace (spin -t ${spin_flags[*]}, last steps):"
    show_trail "${spin_flags[@]}"
  fi
}

# check <same arguments as run_check>: runs it in the background, in a directory of its own,
# at most JOBS at a time; the reports are printed in order by report_all.
checks=0
check() {
  checks=$((checks + 1))
  local dir="$work/$checks"
  mkdir "$dir"
  cp "$MODEL" "$dir/"
  while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do sleep 0.2; done
  (cd "$dir" && run_check "$@" >report 2>&1; touch "$dir/finished") &
}

# check_alone <same arguments>: like check, but with no other check running beside it (a big
# search: its memory and time are not to be shared).
check_alone() {
  while [[ $(jobs -rp | wc -l) -gt 0 ]]; do sleep 0.2; done
  local jobs=$JOBS
  JOBS=1
  check "$@"
  while [[ $(jobs -rp | wc -l) -gt 0 ]]; do sleep 0.2; done
  JOBS=$jobs
}

report_all() {
  local passed=0 failed=0 i
  for ((i = 1; i <= checks; i++)); do
    while [[ ! -f $work/$i/finished ]]; do sleep 0.2; done
    cat "$work/$i/report"
    if head -n 1 "$work/$i/report" | grep -q '^PASS '; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  done
  wait
  echo "model: $passed passed, $failed failed"
  [[ $failed == 0 ]]
}

MODEL=park_notify.pml
# New protocol: safety (assertions + invalid end states) and progress (no non-progress cycle;
# it holds even without weak fairness, so none is assumed). With 3 workers the progress run
# leaves out the spawning ordinary item to stay well under a minute.
check pass "new, 2 workers, safety" -DWORKERS=2 -DPRODUCED=2 -- --
check pass "new, 2 workers, progress" -DWORKERS=2 -DPRODUCED=2 -- -DNP -- -l
check pass "new, 3 workers, safety" -DWORKERS=3 -- --
check pass "new, 3 workers, progress" -DWORKERS=3 -DSPAWN=0 -- -DNP -- -l
# The driver: the long item with two IO completions (dispatch's local and global halves, D2
# claiming the driver's sleeper for the long item's second submit); no long item, with the
# producer (S3 choosing the semaphore while the driver's sleeper is not the last one asleep);
# 3 workers, two asleep on the semaphore from the start and no IO (driver waits ended by unparks
# only: IO makes 3 workers too big for a routine run). D0 is in all of them.
check pass "driver, 2 workers, safety" -DWORKERS=2 -DDRIVER -DPRODUCED=0 -DIO=2 -- --
check pass "driver, 2 workers, progress" -DWORKERS=2 -DDRIVER -DPRODUCED=0 -DIO=2 -- -DNP -- -l
check pass "driver, 2 workers, no long item, safety" \
  -DWORKERS=2 -DDRIVER -DNO_LONG_ITEM -DPRODUCED=1 -DIO=1 -DSPAWN=0 -- --
check pass "driver, 3 workers, safety" \
  -DWORKERS=3 -DDRIVER -DASLEEP=2 -DPRODUCED=0 -DIO=0 -DSPAWN=0 -- --
# Old protocol: must fail. -i (with -DREACH) shortens the phantom trace; the livelock is
# searched under weak fairness (-f) so that the cycle found is one where every other process
# is blocked (the long item waiting, the producer done), not merely starved by the scheduler.
# -A: ignore the (also violated) assertions and look for the cycle itself.
check phantom "old, 2 workers, finds the phantom searcher" \
  -DWORKERS=2 -DOLD_PROTOCOL -- -DREACH -- -i
check cycle "old, 2 workers, finds the park/recheck livelock" \
  -DWORKERS=2 -DOLD_PROTOCOL -- -DNP -- -l -f -A
# attach_driver() and detach_driver() racing with the workers: the code must pass, the code
# before the model's fixes must fail. (-i shortens the detach trace.) The attach run that passes
# has a reaped item run long, so that a worker asleep on the semaphore since before the attach
# (its wake declined: the other searched) must be woken by the reaper's wake: without it
# (-DBUGGY_NO_HANDOVER) it is not, and the second completion waits for the long item.
ATTACH=(-DWORKERS=2 -DATTACH -DNO_LONG_ITEM -DPRODUCED=0 -DSPAWN=0)
check stranded "attach, 2 workers, before the fix: finds a completion stranded" \
  "${ATTACH[@]}" -DBUGGY_ATTACH -DIO=1 -- --
check pass "attach, 2 workers, a reaped item runs long, safety" \
  "${ATTACH[@]}" -DIO=2 -DLONG_IO=1 -- --
check stranded "attach, 2 workers, no handover: finds a completion stranded" \
  "${ATTACH[@]}" -DIO=2 -DLONG_IO=1 -DBUGGY_NO_HANDOVER -- --
check nulldriver "detach, 2 workers, before the fix: finds a null driver_ reloaded" \
  -DWORKERS=2 -DDETACH -DBUGGY_DETACH -DPRODUCED=0 -DIO=1 -DSPAWN=0 -- -DREACH -- -i
check pass "detach, 2 workers, safety" \
  -DWORKERS=2 -DDETACH -DPRODUCED=0 -DIO=1 -DSPAWN=0 -- --
# D0: both workers start as if just out of an item (a busy poll may follow), the first reaped
# item runs long. Without the handover, or without right_freed, the second completion strands.
D0=(-DWORKERS=2 -DDRIVER -DNO_LONG_ITEM -DPRODUCED=0 -DSPAWN=0 -DIO=2 -DBUSY_START -DLONG_IO=1)
check pass "D0, 2 workers, a reaped item runs long, safety" "${D0[@]}" -- --
check pass "D0, 2 workers, a reaped item runs long, progress" "${D0[@]}" -- -DNP -- -l
check stranded "D0, 2 workers, no handover: finds a completion stranded" \
  "${D0[@]}" -DBUGGY_NO_HANDOVER -- --
check stranded "D0, 2 workers, no right_freed recheck: finds a completion stranded" \
  "${D0[@]}" -DBUGGY_NO_RIGHT_RECHECK -- --
# RACE: 3 workers, two of them just out of an item that queued a long one (the wishes' race).
RACE=(-DWORKERS=3 -DDRIVER -DNO_LONG_ITEM -DPRODUCED=0 -DSPAWN=0 -DIO=1 -DBUSY_START
  -DLONG_QUEUED=2)
check pass "RACE, 3 workers, two long items, safety" "${RACE[@]}" -- --
check stranded "RACE, 3 workers, no right_freed recheck: strands a completion" \
  "${RACE[@]}" -DBUGGY_NO_RIGHT_RECHECK -- --
# LOOK: long items that look into the driver first (poll_driver()), where the wishes' clears
# failed. 35 million states, about 4 GB: built with -O2 and searched alone (MODEL_JOBS aside),
# one to two minutes.
LOOK=(-DWORKERS=3 -DDRIVER -DNO_LONG_ITEM -DPRODUCED=0 -DSPAWN=0 -DIO=2 -DBUSY_START
  -DLONG_QUEUED=1 -DLONG_IO=1 -DLOOK_LONG)
check stranded "LOOK, 3 workers, no right_freed recheck: strands a completion" \
  "${LOOK[@]}" -DBUGGY_NO_RIGHT_RECHECK -- --
check_alone pass "LOOK, 3 workers, long items look first, safety" "${LOOK[@]}" -- -O2 --

# worker_drivers.pml: the parking protocol of the worker-drivers mode (see its top comment).
# The protocol with the model's two fixes (the claim and its count in one critical section; a
# parker re-checks stopping after P2) must pass; as first specified it must fail (a claimed
# worker awake before its wake is counted; an item stranded by it; a worker asleep after
# stop()); and so must the mutants, each with its own violation.
MODEL=worker_drivers.pml
WD_STRAND='long_done'                      # the watchdog: bug 6's item left, workers asleep
WD_UNCOUNTED='(pending>=0)'
WD_PHANTOM='(pending<=(((nasleep+'
WD_CLAIMS='(nclaimed==(pending+inflight))'
WD_ASLEEP=' !(((inp4[0]||inp4[1])||inp4[2]))'    # (pan prints two spaces before a '!')
check pass "drivers, 2 workers, safety" -DWORKERS=2 -- --
check pass "drivers, 2 workers, progress" -DWORKERS=2 -DSPAWN=0 -DIO_MASK=2 -- -DNP -- -l
check pass "drivers, 3 workers, IO on w2, safety" \
  -DWORKERS=3 -DIO_MASK=4 -DSPAWN=0 -DPRODUCED=0 -- --
check pass "drivers, 3 workers, no IO, progress" \
  -DWORKERS=3 -DIO=0 -DSPAWN=0 -DPRODUCED=0 -- -DNP -- -l
check pass "drivers, 2 workers, stop(), safety" -DWORKERS=2 -DSTOP -DIO=0 -- --
check pass "drivers, 2 workers, a reaped item runs long, a spurious wake, safety" \
  -DWORKERS=2 -DNO_LONG_ITEM -DLONG_IO=1 -DSPURIOUS=1 -- --
check "assert:$WD_UNCOUNTED" "drivers as specified: finds a claimed worker awake before its count" \
  -DWORKERS=2 -DSPEC_COUNT_OUTSIDE_LOCK -- --
check "assert:$WD_STRAND" "drivers as specified, no invariants: finds an item stranded" \
  -DWORKERS=2 -DSPEC_COUNT_OUTSIDE_LOCK -DNO_INVARIANTS -- --
check "assert:$WD_ASLEEP" "drivers as specified, stop(): finds a worker asleep after stop()" \
  -DWORKERS=2 -DSTOP -DSPEC_STOP -- --
check "assert:$WD_PHANTOM" "drivers, COUNT_THEN_CLAIM: finds a counted wake with nobody" \
  -DWORKERS=2 -DCOUNT_THEN_CLAIM -- --
check "assert:$WD_STRAND" "drivers, NO_P2_RECHECK: finds an item stranded" \
  -DWORKERS=2 -DNO_P2_RECHECK -- --
check "assert:$WD_STRAND" "drivers, PUSH_AFTER_P2: finds an item stranded" \
  -DWORKERS=2 -DPUSH_AFTER_P2 -- --
check "assert:$WD_CLAIMS" "drivers, WITHDRAW_IGNORES_CLAIM: finds a counted wake never taken" \
  -DWORKERS=2 -DWITHDRAW_IGNORES_CLAIM -- --
# PUSH_AFTER_P1 is safe: P2 still comes after the push (see the model's top comment).
check pass "drivers, PUSH_AFTER_P1, 2 workers, no IO: safe" -DWORKERS=2 -DPUSH_AFTER_P1 -DIO=0 -- --

# release_poll_right()'s store under x86-TSO: seq_cst passes, a release store strands the parker.
MODEL=poll_right_release.pml
check pass "release_poll_right, store and S2 fence: the parker takes the right or is woken" -- --
check asleep "release_poll_right, no S2 fence: finds the parker asleep, the right free" \
  -DNO_FENCE -- --

# start_spare_if_needed(): started_ counts the spare before its thread runs, or a submit that
# finds it parked counts nobody asleep.
MODEL=spare_start.pml
check pass "spare start, started_ before the thread: an outside submit wakes the parked spare" \
  -- --
check "assert:( !(submitted)||ran)" \
  "spare start, started_ after the thread: finds the item stranded" -DPUBLISH_AFTER_START -- --

# sync::LifoSemaphore with nudge() (the paused clock's pass of every sleeper through the kernel):
# the counts and the stack stay consistent and nobody is lost; the two mutants must fail.
MODEL=lifo_nudge.pml
check pass "semaphore nudge, 3 waiters, a releaser, a thief, 2 nudges: nobody lost" -- -DSAFETY --
check "assert:((stack_n+C)==W)" "semaphore nudge, NUDGE_CHOOSES_NOBODY: the counts break" \
  -DBUG_NUDGE_CHOOSES_NOBODY -- -DSAFETY --
check "assert:(((((S==0)&&(W==0))&&(C==0))&&(nudged_out==0))&&(stack_n==0))" \
  "semaphore nudge, DECREMENT_ONLY_ON_REPARK: a nudge never ends" \
  -DBUG_DECREMENT_ONLY_ON_REPARK -- -DSAFETY --

report_all
