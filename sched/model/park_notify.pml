/*
 * park_notify.pml — the scheduler's park/notify handshake (sched/src/scheduler.cpp).
 *
 * WHAT IS MODELLED, step for step with scheduler.cpp (each step carries the code's name):
 *   idle_state_  the pair (unparked, searching), changed only by atomic steps, as the packed
 *                word is (fetch_add/fetch_sub/compare_exchange).
 *   sleepers_    the LifoSemaphore, as a counting semaphore: release(1) adds a signal (S4),
 *                wait() takes one or blocks (P4). Which waiter wakes (LIFO) does not matter.
 *   queues       lengths only: global_ (gq) and each worker's LocalQueue (lq[i]).
 *   submitter    notify_parked(): S1 push, S2 fence + load, S3 check-and-CAS loop, S4 release.
 *   worker       run_worker(): find_work (own local queue, global queue, steal_work),
 *                spin_for_work, park() (P1..P4), T1 transition_to_searching, T2
 *                transition_from_searching, and the wake deferral of submit()/run_worker.
 *   The NEW park() is the default; -DOLD_PROTOCOL gives the old one (HEAD before the fix),
 *   whose P3 on finding work did `unparked += 1` and returned, not searching.
 *
 * SCENARIO: WORKERS (2 or 3) workers, all started (no spares, no blocking regions, no stop).
 *   Worker 0 starts inside a long item (the "bug 6" shape): it submits two items to its own
 *   local queue (the first defers its wake to the item's end, the second notifies at once, as
 *   submit() does) and then keeps running until another worker has taken one of them.
 *   A producer outside the pool submits PRODUCED (default 1) items to the global queue
 *   (S1..S4), racing with the workers' park/notify. Up to SPAWN (default 1) ordinary items may,
 *   when run, queue one item to their own worker's local queue ("queue one, then return").
 *
 * MEMORY MODEL: Promela is sequentially consistent. That is what the seq_cst fences at S2 (in
 *   notify_parked) and P2 (in park) give the accesses they order: the queue push/pops and the
 *   idle_state_ read-modify-writes and loads (all seq_cst RMWs or fenced). So the Dekker pair
 *   "S1 push; S2 load idle_state_" / "P1 RMW idle_state_; P2 read the queues" is checked under
 *   SC, which is exactly what the fences are there to provide.
 *
 * ABSTRACTIONS, and why:
 *   - Each CAS loop keeps the code's shape: one load, then a CAS step that fails (and reloads)
 *     if idle_state_ changed since. compare_exchange_weak's spurious failures are just extra
 *     retries and add no behaviour.
 *   - anything_queued() (P2) reads the queues one by one, as the code does.
 *   - steal_work: one probe takes any item of another worker's local queue or of the global
 *     queue. The code's "oldest item unchanged since my previous probe" rule only delays a steal
 *     by one probe; the extra probe is spin_for_work, modelled as one more probe, or none (a
 *     zero spin budget), chosen freely.
 *   - The global-queue interval (every 61st pop), the tail-history guess of submit() (a long
 *     tail makes a first submit notify at once: covered by the second submit, which does), the
 *     queue overflow to global_, counters and timing are left out: none touches idle_state_
 *     or sleepers_ beyond a notify_parked() call, which the model already makes.
 *   - Bounded work (2 + PRODUCED + SPAWN items) keeps the state space finite and small.
 *
 * GHOST STATE (not in the code; only for the properties):
 *   nasleep/asleep[i]  workers between P1 and their return from P4 that did not re-join at P3
 *   pending            wakes counted at S3 whose signal no wait() has consumed yet
 *                      (= signals in sleepers_ + wakes counted but not yet released at S4)
 *   nsearching         workers whose Worker::searching is set
 *
 * PROPERTIES:
 *   1. No phantom searcher (safety; monitor `invariants`, checked in every reachable state):
 *        pending   <= nasleep                  every pending wake has a sleeper to consume it
 *        unparked  == (N - nasleep) + pending
 *        searching == nsearching + pending
 *      The OLD protocol violates the first: after its P3 a worker leaves the asleep set while a
 *      wake counted for it stays pending, a searcher that fills the searcher cap (T1) with
 *      nobody behind it.
 *   2. No lost wakeup / no deadlock (safety; `watchdog` + invalid end states): when nothing
 *      can move (timeout), every queue is empty and the long item has finished. Workers asleep
 *      in P4 are a valid end state (label end_p4).
 *   3. Progress (liveness; -DNP, pan -l): every cycle takes an item (label progress_took).
 *      The NEW protocol has no non-progress cycle even without fairness. In the OLD protocol
 *      the idle worker loops P1, P2, P3 (unparked += 1), T1 (fails: the phantom holds the
 *      searcher cap) forever while the long item waits for it. That search uses weak fairness
 *      (pan -f), so that the cycle found is one in which every other process is blocked (the
 *      long item at its guard, the producer done), not one that merely never schedules them.
 *
 * HOW TO RUN: `make model` (sched/model/check.sh, which works in a temporary directory):
 *   spin -a -DWORKERS=2 park_notify.pml && cc -O2 -o pan pan.c && ./pan -m100000
 *   spin -a -DWORKERS=2 park_notify.pml && cc -O2 -DNP -o pan pan.c && ./pan -m100000 -l
 *   -DOLD_PROTOCOL (to spin) for the old park(); -DPRODUCED=n, -DSPAWN=n change the workload.
 *   The old protocol's livelock: cc -DNP ... && ./pan -m100000 -l -f -A (-A: skip the asserts).
 *   Replay a counterexample: spin -t [same -D flags] park_notify.pml prints its interleaving
 *   as one line per step ("w1 P1 parks -> idle_state_ (...)"; w<i> worker i, x<N> producer);
 *   add -p for every statement.
 */

#ifndef WORKERS
#define WORKERS 2
#endif
#define N WORKERS
#ifndef PRODUCED
#define PRODUCED 1
#endif
#ifndef SPAWN
#define SPAWN 1
#endif

/* idle_state_: (unparked, searching). All N workers start awake, none searching. */
byte unparked = N;
byte searching = 0;
byte sem = 0;        /* sleepers_: signals not yet consumed */
byte gq = 0;         /* global_ queue length */
byte lq[3];          /* local queue lengths (index < N used) */
bool wsearching[3];  /* Worker::searching */
byte spawn_left = SPAWN;
bool taken_by_other = false;  /* another worker took an item of worker 0's local queue */
bool long_done = false;       /* the long item has finished */

/* ghost state, see the top comment */
bool asleep[3];
byte nasleep = 0;
byte pending = 0;
byte nsearching = 0;

/* Trace output for `spin -t` replays (pan ignores printf); always inside an atomic step. */
/* who: w<i> is worker i, x<N> the external producer */
#define WHO   (_pid < N -> 'w' : 'x'), _pid
#define STATE printf(" -> idle_state_ (unparked %d, searching %d), pending %d, asleep %d\n", \
                     unparked, searching, pending, nasleep)

#define INV_PHANTOM   (pending <= nasleep)
#define INV_UNPARKED  (unparked + nasleep == N + pending)
#define INV_SEARCHING (searching == nsearching + pending)

/* notify_parked(): S2..S4. Uses the caller's locals s_u, s_s, woke. */
inline notify() {
  atomic { s_u = unparked; s_s = searching };  /* S2: fence(seq_cst); s = idle_state_.load() */
  do                                            /* S3 */
  :: atomic { s_s != 0 -> printf("%c%d S3 returns: searching %d\n", WHO, s_s) }; break
                                                /* a searcher (or a counted wake) covers it */
  :: atomic { s_s == 0 && s_u >= N -> printf("%c%d S3 returns: unparked %d\n", WHO, s_u) };
     break                                      /* enough workers awake */
  :: else ->
     atomic {                                   /* S3: CAS(s, s + (unparked 1, searching 1)) */
       if
       :: unparked == s_u && searching == s_s ->
          unparked++; searching++; pending++; woke = true;
          printf("%c%d S3 counts a wake", WHO); STATE
       :: else -> s_u = unparked; s_s = searching   /* failed: retry with the fresh value */
       fi
     };
     if
     :: woke ->                                 /* S4: sleepers_.release(1) */
        atomic { sem++; printf("%c%d S4 release(1), signals %d\n", WHO, sem) };
        break
     :: else -> skip
     fi
  od;
  s_u = 0; s_s = 0; woke = false
}

/* T1 transition_to_searching(w): ok = whether this worker now searches. */
inline t1() {
  if
  :: wsearching[me] -> ok = true
  :: else ->
     s_s = searching;                           /* T1: s = idle_state_.load() */
     do
     :: 2 * s_s >= N ->                         /* enough searchers already: no work */
        atomic { ok = false; printf("w%d T1 fails: searching %d\n", me, s_s) };
        break
     :: else ->
        atomic {                                /* T1: CAS(s, s + searching 1) */
          if
          :: searching == s_s -> searching++; wsearching[me] = true; nsearching++; ok = true;
             printf("%c%d T1 starts searching", WHO); STATE
          :: else -> s_s = searching
          fi
        };
        if :: ok -> break :: else -> skip fi
     od;
     s_s = 0
  fi
}

/* One steal probe: any item of another worker's local queue, or of the global queue. */
inline steal() {
  atomic {
    if
    :: gq > 0 -> gq--; got = true; printf("%c%d steals from global_\n", WHO)
    :: me != 0 && lq[0] > 0 ->
       lq[0]--; got = true; taken_by_other = true; printf("%c%d steals from w0\n", WHO)
    :: me != 1 && lq[1] > 0 -> lq[1]--; got = true; printf("%c%d steals from w1\n", WHO)
    :: N > 2 && me != 2 && lq[2] > 0 -> lq[2]--; got = true; printf("%c%d steals from w2\n", WHO)
    :: else -> skip
    fi
  }
}

/* End of a running item: the deferred wake decision of run_worker(). */
inline item_end() {
  if
  :: deferred ->
     deferred = false;
     if
     :: lq[me] + gq > 1 -> notify()             /* surplus queued: S2..S4 */
     :: else -> skip
     fi
  :: else -> skip
  fi
}

active [N] proctype worker() {
  byte me = _pid;    /* workers are declared first: pids 0..N-1 */
  byte s_u, s_s;     /* a loaded idle_state_ */
  bool got, ok, q, woke, deferred;

  if
  :: me == 0 ->
     /* The long item ("bug 6"): queue two items locally, keep running until another worker
        took one of them. */
     atomic { lq[0]++; printf("w0 S1 long item queues 1 locally (wake deferred)\n") };
     deferred = true;
     atomic { lq[0]++; printf("w0 S1 long item queues 2 locally (surplus: notify)\n") };
     notify();                       /* notify at once: S2..S4 */
     taken_by_other;                 /* keeps running */
     atomic { long_done = true; printf("w0 long item ends\n") };
     item_end()
  :: else -> skip
  fi;

top:
  /* find_work: own local queue, then the global queue, then steal_work */
  atomic {
    if
    :: lq[me] > 0 -> lq[me]--; got = true; printf("w%d pops its own queue\n", me)
    :: else -> skip
    fi
  };
  if
  :: !got ->
     atomic {
       if
       :: gq > 0 -> gq--; got = true; printf("w%d pops global_\n", me)
       :: else -> skip
       fi
     }
  :: else -> skip
  fi;
  if
  :: !got -> t1(); if :: ok -> ok = false; steal() :: else -> skip fi   /* steal_work */
  :: else -> skip
  fi;
  if
  :: !got ->                                     /* spin_for_work */
     t1();
     if
     :: ok -> ok = false;
        if
        :: steal()                               /* a probe */
        :: skip                                  /* zero spin budget / deadline */
        fi
     :: else -> skip
     fi
  :: else -> skip
  fi;
  if
  :: !got -> goto park
  :: else -> skip
  fi;

progress_took:
  got = false;
  if
  :: wsearching[me] ->                           /* T2 transition_from_searching */
     atomic {
       wsearching[me] = false; nsearching--;
       s_s = searching; searching--;             /* prev = fetch_sub(searching 1) */
       printf("w%d T2 stops searching", me); STATE
     };
     if
     :: s_s == 1 -> s_s = 0; notify()            /* the last searcher found work: S2..S4 */
     :: else -> s_s = 0
     fi
  :: else -> skip
  fi;
  /* run the item: it may queue one item locally and return ("queue one, then return") */
  if
  :: atomic {                                   /* S1 (local push), first submit */
       spawn_left > 0 -> spawn_left--; lq[me]++; printf("w%d S1 item queues 1 locally\n", me)
     };
     deferred = true                             /* its wake deferred to the item's end */
  :: skip
  fi;
  item_end();
  goto top;

park:
  atomic {                                       /* P1: idle_state_ -= (1, w.searching) */
    unparked--;
    if
    :: wsearching[me] -> searching--; wsearching[me] = false; nsearching--
    :: else -> skip
    fi;
    asleep[me] = true; nasleep++;
    printf("w%d P1 parks", me); STATE
  };
  /* P2: fence(seq_cst); anything_queued() reads the queues one by one */
  q = (gq > 0);
  if :: !q -> q = (lq[0] > 0) :: else -> skip fi;
  if :: !q -> q = (lq[1] > 0) :: else -> skip fi;
  if :: !q && N > 2 -> q = (lq[2] > 0) :: else -> skip fi;
#ifdef OLD_PROTOCOL
  if
  :: q ->                                        /* OLD P3: stay up, not searching */
     q = false;
     atomic {
       unparked++; asleep[me] = false; nasleep--;
       printf("w%d OLD P3 work queued: unparked += 1, not searching", me); STATE
     };
     goto top
  :: else -> skip
  fi;
#else
  if
  :: q ->                                        /* P3: count ourselves in by S3's rule */
     q = false;
     atomic { s_u = unparked; s_s = searching };
     do
     :: atomic {                                /* covered by others: sleep (P4) */
          s_s != 0 || s_u >= N -> printf("w%d P3 work queued, covered: to P4\n", me)
        };
        break
     :: else ->
        atomic {                                 /* P3: CAS(s, s + (unparked 1, searching 1)) */
          if
          :: unparked == s_u && searching == s_s ->
             unparked++; searching++; wsearching[me] = true; nsearching++;
             asleep[me] = false; nasleep--; woke = true;
             printf("w%d P3 work queued: counts itself in, searching", me); STATE
          :: else -> s_u = unparked; s_s = searching
          fi
        };
        if :: woke -> break :: else -> skip fi
     od;
     s_u = 0; s_s = 0;
     if
     :: woke -> woke = false; goto top           /* return, searching */
     :: else -> skip
     fi
  :: else -> skip
  fi;
#endif
end_p4:
  atomic {                                       /* P4: sleepers_.wait() */
    sem > 0 -> sem--; pending--; asleep[me] = false; nasleep--;
    wsearching[me] = true; nsearching++;         /* the waker counted us as searching (S3) */
    printf("w%d P4 wakes, searching", me); STATE
  };
  goto top
}

/* An external submitter: submit() off the pool, PRODUCED items to the global queue. */
active proctype producer() {
  byte s_u, s_s, n;
  bool woke;
  do
  :: n < PRODUCED ->
     n++;
     atomic { gq++; printf("%c%d S1 pushes to global_\n", WHO) };  /* S1: global_.push */
     notify()                                    /* S2..S4 */
  :: else -> break
  od
}

/* Property 1, checked in every reachable state. */
active proctype invariants() {
end_inv:
  atomic {
    !(INV_PHANTOM && INV_UNPARKED && INV_SEARCHING) ->
      assert(INV_UNPARKED);
      assert(INV_SEARCHING);
      assert(INV_PHANTOM)   /* no phantom searcher */
  }
}

/* Property 2: when nothing can move, no work is left behind. */
active proctype watchdog() {
end_wd:
  timeout ->
    assert(long_done && gq == 0 && lq[0] == 0 && lq[1] == 0 && lq[2] == 0)
}
