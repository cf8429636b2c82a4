/*
 * lifo_nudge.pml: sync::LifoSemaphore (sync/src/lifo_semaphore.cpp) with nudge().
 *
 * The state word (signals S, waiters W, signaled_to_wake C) changes by CAS: each CAS is one
 * atomic step here. A critical section under stack_mutex_ is one atomic step too: only
 * holders of the mutex touch the stack and nudged_out_, and what it does to the word is one
 * CAS (a concurrent try_wait() or fast-path release() only makes the CAS retry, which is the
 * same as the section running after it). The stack is a set of ids (which waiter a release
 * chooses does not matter for the counts); a release's chosen set is woken one blocker at a
 * time after its section, as in the code. ThreadBlocker: a permit bit per thread.
 *
 * Threads: NW waiters, each wait()s once; a releaser that releases NW signals in chunks of
 * 1 or 2; a thief that try_wait()s and gives back what it took (the chosen-waiter-robbed
 * path); a nudger that nudges NN times with a count it read earlier (possibly stale) and
 * polls nudged().
 * Checked: the stack holds W - C threads after every section; nobody is woken twice
 * (a permit is never set twice); at the end (every process done) all waiters returned and
 * S = W = C = nudged_out = 0 (a lost wakeup is a waiter blocked forever: an invalid end
 * state).
 *   spin -a lifo_nudge.pml && cc -O1 -DSAFETY -o pan pan.c && ./pan -m100000
 * (sched/model/check.sh runs it, with the mutants) passes (about 5.3 million states). Mutants that must fail: -DBUG_NUDGE_CHOOSES_NOBODY (the
 * nudge pops without counting the popped as chosen) and -DBUG_DECREMENT_ONLY_ON_REPARK (a
 * nudged waiter that takes a signal keeps nudged_out_ up: nudged() never true again).
 */
#define NW 3
#ifndef NN
#define NN 2
#endif

byte S = 0; byte W = 0; byte C = 0;
bool on_stack[NW];
byte stack_n = 0;
bool permit[NW];
bool nudged[NW];
byte nudged_out = 0;
byte returned = 0;

inline wake(id) {
  assert(!permit[id]);  /* one wake per pop: never two before the owner consumes one */
  permit[id] = true
}

inline check_inv() {
  assert(stack_n + C == W);
  assert(C <= W)
}

proctype waiter(byte me) {
  bool took = false;
  /* try_wait() */
  atomic { if :: S > 0 -> S--; took = true :: else -> skip fi };
  if
  :: took -> goto done
  :: else -> skip
  fi;
  /* register under the mutex: take a signal that arrived, or push */
  atomic {
    if
    :: S > 0 -> S--; took = true
    :: else -> W++; on_stack[me] = true; stack_n++
    fi;
    check_inv()
  };
  if
  :: took -> goto done
  :: else -> skip
  fi;
loop:
  /* blocker->wait() */
  atomic { permit[me] -> permit[me] = false };
  /* if (self.nudged) yield(); then the re-check under the mutex */
  atomic {
    assert(!on_stack[me]);
#ifndef BUG_DECREMENT_ONLY_ON_REPARK
    if
    :: nudged[me] -> nudged[me] = false; assert(nudged_out > 0); nudged_out--
    :: else -> skip
    fi;
#endif
    assert(C > 0 && W > 0);
    C--;
    if
    :: S > 0 -> S--; W--; took = true
    :: else ->
#ifdef BUG_DECREMENT_ONLY_ON_REPARK
       if
       :: nudged[me] -> nudged[me] = false; nudged_out--
       :: else -> skip
       fi;
#endif
       on_stack[me] = true; stack_n++
    fi;
    check_inv()
  };
  if
  :: took -> goto done
  :: else -> goto loop
  fi;
done:
  atomic { returned++ }
}

/* release(n) */
inline release(n) {
  fast = false;
  atomic { if :: W == 0 -> S = S + n; fast = true :: else -> skip fi };
  if
  :: fast -> skip
  :: else ->
    atomic {
      S = S + n;
      wanted = (S < W -> S : W);
      wk = (wanted > C -> wanted - C : 0);
      C = C + wk;
      /* pop wk entries, any of them */
      i = 0;
      do
      :: wk == 0 -> break
      :: wk > 0 ->
        if
        :: i < NW && on_stack[i] -> on_stack[i] = false; stack_n--; towake[i] = true; wk--
        :: i < NW && !on_stack[i] -> skip
        :: i >= NW -> assert(false)  /* the stack holds fewer than chosen */
        fi;
        i++
      od;
      check_inv()
    };
    i = 0;
    do
    :: i < NW -> if :: towake[i] -> towake[i] = false; wake(i) :: else -> skip fi; i++
    :: else -> break
    od
  fi
}

proctype releaser() {
  byte left = NW; byte n; byte wanted; byte wk; byte i;
  bool towake[NW]; bool fast;
  do
  :: left == 0 -> break
  :: left >= 1 -> n = 1; left = left - 1; release(n)
  :: left >= 2 -> n = 2; left = left - 2; release(n)
  od
}

proctype thief() {
  bool took = false;
  byte n; byte wanted; byte wk; byte i;
  bool towake[NW]; bool fast;
  atomic { if :: S > 0 -> S--; took = true :: else -> skip fi };
  if
  :: took -> n = 1; release(n)
  :: else -> skip
  fi
}

proctype nudger() {
  byte k = 0; byte expected; byte i; bool ok; bool back;
  bool towake[NW];
  do
  :: k == NN -> break
  :: k < NN ->
    expected = W;  /* read earlier: may be stale by the nudge */
    atomic {
      ok = false;
      if
      :: nudged_out != 0 -> skip
      :: nudged_out == 0 && (W != expected || C != 0) -> skip
      :: nudged_out == 0 && W == expected && C == 0 ->
        assert(S == 0 || W == 0);  /* C >= min(S, W) */
#ifndef BUG_NUDGE_CHOOSES_NOBODY
        C = W;
#else
        C = 0;  /* pops the stack without counting the popped as chosen */
#endif
        i = 0;
        do
        :: i < NW ->
          if
          :: on_stack[i] -> on_stack[i] = false; stack_n--; towake[i] = true;
                            assert(!nudged[i]); nudged[i] = true; nudged_out++
          :: else -> skip
          fi;
          i++
        :: else -> break
        od;
        ok = true;
        check_inv()
      fi
    };
    i = 0;
    do
    :: i < NW -> if :: towake[i] -> towake[i] = false; wake(i) :: else -> skip fi; i++
    :: else -> break
    od;
    /* nudged(), under the mutex */
    atomic { back = (nudged_out == 0) };
    k++
  od
}

init {
  byte j;
  atomic {
    j = 0;
    do
    :: j < NW -> run waiter(j); j++
    :: else -> break
    od;
    run releaser();
    run thief();
    run nudger()
  };
  /* every other process has ended */
  (_nr_pr == 1);
  assert(returned == NW);
  assert(S == 0 && W == 0 && C == 0 && nudged_out == 0 && stack_n == 0)
}
