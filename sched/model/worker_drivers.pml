/*
 * worker_drivers.pml: the parking protocol of per-worker parking (sched/src/per_worker_parking.cpp).
 * Conventions as in park_notify.pml (step names, ghost state, the three properties).
 *
 * WHAT IS MODELLED. Every worker owns a parker (its driver: its io_uring ring, or a futex for a
 *   spare). No poll right, no LifoSemaphore.
 *   idle_state_  (unparked, searching), packed as the code packs it (unparked << 16 | searching,
 *                a 32-bit word): every fetch_add/fetch_sub/CAS acts on the word, so a searching
 *                count taken below 0 borrows from unparked, as it would in the code.
 *   stack        the sleeper stack (LIFO) and each worker's sleep (AWAKE, ASLEEP, CLAIMED):
 *                every critical section of its mutex is one atomic step (nothing else touches
 *                what the mutex guards, so this is exact).
 *   parker       per worker: a sticky unpark flag and the worker's own IO. wait() returns when
 *                the flag is set or its IO is ready (or, -DSPURIOUS=k, k times for nothing); it
 *                reaps all ready completions or one (a batch) and consumes the flag (or leaves
 *                it, when it reaped). wait(0) (a busy worker's look) reaps and consumes.
 *   submitter    notify_parked(): S1 push, S2 fence + load, S3 (searching, or unparked >= N:
 *                return), S4 lock, pop the top sleeper (none: return), CLAIMED, unlock, then
 *                fetch_add (unparked 1, searching 1), then unpark() its parker.
 *   park         R0 push itself, ASLEEP (under the lock); P1 idle_state_ -= (1, w.searching);
 *                P2 fence, anything_queued() (queue by queue); P3 queued: covered (searching
 *                or unparked >= N) -> P4, else WITHDRAW; P4 wait(). Woken: CLAIMED -> AWAKE,
 *                searching (the waker counted it); ASLEEP with nothing reaped and no IO
 *                ready: back to P4 (still on the stack, counts untouched) or WITHDRAW.
 *   WITHDRAW     under the lock: CLAIMED -> as woken; else off the stack, AWAKE; then a CAS loop
 *                counting itself in (unparked 1; searching 1 only if none searches and it
 *                reaped nothing: one woken by its own IO runs what it reaped, see
 *                IO_WAKE_MAY_SEARCH).
 *   dispatch     after a wake or a look: the first completion to its own local queue (run next),
 *                the rest to global_ with a notify.
 *   worker loop  find_work (own queue, global, T1 + one steal probe), spin_for_work (T1, one
 *                probe or none), park; T2 after taking an item (the last searcher notifies);
 *                an item may queue one item locally (SPAWN), its wake deferred to its end; after
 *                each item the worker may look (wait(0), dispatch). stopping is checked at the
 *                top of the loop and before spinning.
 *   stop()       -DSTOP: stopping set, then every sleeper on the stack claimed, counted and
 *                unparked, one by one until the stack is empty; then the join.
 *
 * SCENARIO: WORKERS (2 or 3) workers, all started awake. Worker 0 starts inside the long item
 *   of park_notify.pml ("bug 6": queues two items locally, the first with its wake deferred,
 *   the second with a notify, and runs until another worker took one; -DNO_LONG_ITEM: no such
 *   item). A producer outside the pool pushes PRODUCED (1) items to global_. SPAWN (1) items
 *   queue one more. IO (1) completions per worker (the workers of IO_MASK, default all) become
 *   ready at any time, also while the owner runs. -DLONG_IO=k: the first k items a dispatch puts
 *   in a worker's own queue run for ever (label end_long; their owner's later IO waits for
 *   them: the accepted gap of the design, not flagged).
 *
 * ABSTRACTIONS as in park_notify.pml (queue lengths only, one-probe steals, CAS loops with
 *   their load, no spares or blocking regions: started = N). Promela is sequentially
 *   consistent: that is what the fences of S2 and P2 give the Dekker pair "S1; S2 load" /
 *   "P1; P2 loads", and the mutex orders the rest.
 *
 * GHOST STATE:
 *   asleep/nasleep   workers between P1 and being counted back in (taking up a claim, or the
 *                    CAS of WITHDRAW)
 *   prepark[i]       between R0 and P1: on the stack, still counted unparked
 *   pending          wakes counted (S4's fetch_add) and not yet taken up by their worker
 *   nclaimed         workers whose sleep is CLAIMED; inflight: claims whose count is not made
 *   nsearching       workers whose Worker::searching is set
 *   inp4[i], inlong[i]  in P4's wait(); running a long item
 *
 * PROPERTIES:
 *   1. Invariants, in every state (monitor `invariants`):
 *        pending  >= 0                 a claimed worker takes up its wake only once counted
 *        unparked == N - nasleep + pending,  searching == nsearching + pending
 *        pending  <= nasleep + (claimed workers between R0 and P1)   no phantom: every
 *                    counted wake has a sleeper. The second term is needed: R0 comes before P1
 *                    (it must: PUSH_AFTER_P2 below), so S4 can claim and count a worker that is
 *                    on the stack but not yet counted out; its P1 then makes it an ordinary
 *                    pending sleeper, whose wait() returns at once. Benign.
 *        nclaimed == pending + inflight   every counted wake belongs to a CLAIMED worker
 *        an ASLEEP worker is on the stack exactly once; any other is not on it
 *   2. Nothing stranded (watchdog, at timeout): the long item finished; if a worker sleeps in
 *      P4, every queue is empty; no IO ready for a worker asleep in P4 (except behind a long
 *      item). Workers in P4, in long items, and the IO source are valid end states. -DSTOP:
 *      no worker left in P4 after stop().
 *   3. Progress (-DNP, pan -l): every cycle takes an item (label progress_took).
 *
 * WHAT THE RUNS FOUND in the protocol as specified:
 *   - SPEC BUG 1, the claim visible before its count (-DSPEC_COUNT_OUTSIDE_LOCK). S4 unlocks
 *     between CLAIMED and the fetch_add; the claimed worker can see CLAIMED in that window (its
 *     wait() returned for its own IO, or a stale unpark, or it WITHDRAWs from P3) and runs as a
 *     counted searcher that idle_state_ does not count yet (pending -1). If it then finds work,
 *     its T2 fetch_sub takes searching below 0: the word reads (unparked - 1, 65535). Trace
 *     (2 workers): w1 parks, wakes for its IO; w0's long item queues 2 and notifies: S4 claims
 *     w1; w1 takes the claim (pending -1), runs its completion, T2 -> (0, 65535); the
 *     producer's S3 returns (searching 65535), w1's T1 fails (65535), w1 parks: P2 sees w0's
 *     item, P3 sees searching 65535: "covered", P4; w0's count lands (1, 0), its unpark wakes
 *     w1 as ASLEEP with nothing reaped: back to P4. w0's item and the producer's wait for ever
 *     behind the long item (watchdog). Fix (the default): claim and count in the same critical
 *     section (lock; pop; CLAIMED; fetch_add; unlock), so CLAIMED is never seen uncounted.
 *   - SPEC BUG 2, stop() (-DSTOP -DSPEC_STOP). stop() claims the sleepers on the stack once; a
 *     worker that has seen stopping clear (loop top, spin) and parks after that pass pushes
 *     itself and sleeps for ever (the join hangs). Fix (the default): park re-checks stopping
 *     after R0 (at P2, after the fence, as today's park() does) and WITHDRAWs; the mutex
 *     orders it after stop()'s last pass, so it sees stopping.
 *   - The mutants: COUNT_THEN_CLAIM (count, then claim): a parker withdraws between the count
 *     and the pop, the counted wake has nobody (phantom); NO_P2_RECHECK: an item stranded;
 *     WITHDRAW_IGNORES_CLAIM: the claim is never taken up (nclaimed != pending + inflight).
 *     PUSH_AFTER_P1 is NOT a bug: P2 still follows the push, so a submitter that saw the P1
 *     count and found no one on the stack popped before the push, and its S1 is seen at P2
 *     (passes: 2 workers 8 million states; 3 workers, no IO or spawn, 52 million). The
 *     ordering that matters is push before P2: PUSH_AFTER_P2 strands an item.
 *
 *   - The code's one departure from the spec, IO_WAKE_MAY_SEARCH (a worker woken by its own
 *     IO counts itself in as running, not as a searcher, so its first item's T2 wakes nobody):
 *     passes the same checks as the spec (2 workers 8.4 million states, 3 workers 11.2 million).
 *
 *   With both fixes it passes (check.sh, pan -O0): 2 workers 8.5 million states (safety), 1.9
 *   million (progress, no spawn, IO on w1); 3 workers, IO on w2, no producer or spawn, 11.3
 *   million (safety); 3 workers, no IO, 4.9 million (progress); stop() 2.7 million; a reaped
 *   item run long with a spurious wake 4.9 million.
 *
 * HOW TO RUN: sched/model/check.sh (make model), or
 *   spin -a -DWORKERS=2 worker_drivers.pml && cc -O2 -o pan pan.c && ./pan -m100000
 *   (-DNP to cc and -l to pan for progress; spin -t with the same -D flags replays a trace.)
 */

/* The fixes the model calls for (see the top comment) are its default; -DSPEC_COUNT_OUTSIDE_LOCK
   and -DSPEC_STOP model the protocol as first specified. */
#if !defined(SPEC_COUNT_OUTSIDE_LOCK) && !defined(COUNT_THEN_CLAIM)
#define FIX_COUNT_UNDER_LOCK
#endif
#ifndef SPEC_STOP
#define FIX_STOP
#endif
/* A worker woken by its own IO (it reaped, nobody claimed it) counts itself in as running, not
   searching: every sleeper watches its own parker, so the T2 wake its first item would make as
   the last searcher is a futile trip (the code: per_worker_parking.cpp). -DSPEC_IO_WAKE_SEARCHES:
   as first specified, a searcher if nobody searches. */
#ifdef SPEC_IO_WAKE_SEARCHES
#define IO_WAKE_MAY_SEARCH true
#else
#define IO_WAKE_MAY_SEARCH (r == 0)
#endif

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
#ifndef IO
#define IO 1
#endif
#ifndef IO_MASK
#define IO_MASK 7                /* the workers that get IO (bit i: worker i) */
#endif
#ifndef LONG_IO
#define LONG_IO 0
#endif
#ifndef SPURIOUS
#define SPURIOUS 0
#endif

/* sleep states (read and written only under the stack's mutex) */
#define AWAKE   0
#define ASLEEP  1
#define CLAIMED 2

/* idle_state_, packed as the code packs it: unparked << 16 | searching, 32 bits. Fetch_adds and
   fetch_subs act on the whole word, so a searching count taken below 0 borrows from unparked,
   as it would in the code. */
#define ONE_U 65536
#define ONE_S 1
#define UNP(s)  (((s) >> 16) & 65535)
#define SRCH(s) ((s) & 65535)
int idle = N * ONE_U;        /* all N workers awake, none searching */

byte gq = 0;                  /* global_ queue length */
byte lq[3];                   /* local queue lengths */
bool wsearching[3];           /* Worker::searching */
byte spawn_left = SPAWN;
bool taken_by_other = false;  /* another worker took an item of worker 0's local queue */
#ifdef NO_LONG_ITEM
bool long_done = true;
#else
bool long_done = false;
#endif

/* the sleeper stack (LIFO, under a mutex) and each worker's sleep state */
byte stk[3];                  /* worker ids, stk[0] the bottom; slots >= sp are 0 */
byte sp = 0;
byte sleep[3];
/* each worker's parker (its driver): a sticky unpark flag, and its own IO */
bool uflag[3];
byte io_left[3] = IO;        /* completions still to become ready, per worker */
byte io_ready[3];
byte spur_left = SPURIOUS;    /* spurious returns of wait() still allowed */
byte long_left = LONG_IO;     /* reaped items still to be made long */
byte longq[3];                /* long items queued in lq[i] */
bool stopping = false;
#ifdef STOP
bool stop_done = false;
byte nleft = 0;               /* workers that left run_worker's loop */
#endif

/* ghost state */
bool asleep[3];
byte nasleep = 0;
short pending = 0;            /* wakes counted (S4's fetch_add) not yet taken up */
byte nclaimed = 0;            /* workers whose sleep is CLAIMED */
short inflight = 0;           /* claims made whose wake is not counted yet (between S4's steps) */
byte nsearching = 0;
bool inlong[3];               /* running a long item (its IO waits for it, accepted) */
bool inp4[3];                 /* in parker.wait() (P4) */
bool prepark[3];              /* between R0 and P1: on the stack, still counted unparked */

#define WHO   (_pid < N -> 'w' : (_pid == N -> 'x' : 's')), _pid
#define STATE printf(" -> idle_state_ (unparked %d, searching %d), pending %d, asleep %d\n", \
                     UNP(idle), SRCH(idle), pending, nasleep)

#define ONSTK(w) ((sp > 0 && stk[0] == w -> 1 : 0) + (sp > 1 && stk[1] == w -> 1 : 0) + \
                  (sp > 2 && stk[2] == w -> 1 : 0))
#define STK_OK(w) ((sleep[w] == ASLEEP -> ONSTK(w) == 1 : ONSTK(w) == 0))

#define PRE_CLAIMED(w) (prepark[w] && sleep[w] == CLAIMED -> 1 : 0)
#define INV_PHANTOM   (pending <= nasleep + PRE_CLAIMED(0) + PRE_CLAIMED(1) + PRE_CLAIMED(2))
#define INV_UNPARKED  (UNP(idle) + nasleep == N + pending)
#define INV_SEARCHING (SRCH(idle) == nsearching + pending)
#define INV_COUNTED   (pending >= 0)
#define INV_CLAIMS    (nclaimed == pending + inflight)
#define INV_STACK     (STK_OK(0) && STK_OK(1) && (N < 3 || STK_OK(2)))

inline push_me() {
  stk[sp] = me; sp++
}
inline pop_top() {
  sp--; v = stk[sp]; stk[sp] = 0
}
inline remove_me() {
  i = 0;
  do
  :: i < sp && stk[i] != me -> i++
  :: else -> break
  od;
  if
  :: i < sp ->
     do
     :: i + 1 < sp -> stk[i] = stk[i + 1]; i++
     :: else -> break
     od;
     sp--; stk[sp] = 0
  :: else -> skip
  fi;
  i = 0
}

/* S4, second half: count the wake, unpark the claimed worker v. */
inline count_wake() {
  atomic {
    idle = idle + ONE_U + ONE_S; pending++; inflight--;
    printf("%c%d S4 counts the wake of w%d", WHO, v); STATE
  }
}
inline unpark_v() {
  atomic { uflag[v] = true; printf("%c%d S4 unparks w%d\n", WHO, v) }
}

/* notify_parked(): S2..S4. Locals s, v, got_v of the caller. */
inline notify() {
  atomic { s = idle };                           /* S2: fence(seq_cst); load idle_state_ */
  if
  :: atomic { SRCH(s) != 0 -> printf("%c%d S3 returns: searching %d\n", WHO, SRCH(s)) }
  :: atomic { SRCH(s) == 0 && UNP(s) >= N -> printf("%c%d S3 returns: unparked %d\n", WHO, UNP(s)) }
  :: SRCH(s) == 0 && UNP(s) < N ->
#ifdef COUNT_THEN_CLAIM
     atomic {                                    /* the mutant: count first */
       idle = idle + ONE_U + ONE_S; pending++; inflight--;
       printf("%c%d S4 (count first) counts a wake", WHO); STATE
     };
#endif
     atomic {                                    /* S4: lock; pop; CLAIMED; unlock */
       if
#if defined(FIX_COUNT_UNDER_LOCK) && !defined(SPEC_NO_S3_RECHECK)
       /* The code (review-pw): S3 again on idle_state_ loaded under the lock, so a notifier
          whose S2 load predates another's claim does not claim a second sleeper. */
       :: SRCH(idle) != 0 || UNP(idle) >= N ->
          printf("%c%d S4 re-checks S3 under the lock: returns\n", WHO)
       :: SRCH(idle) == 0 && UNP(idle) < N && sp > 0 -> pop_top();
#else
       :: sp > 0 -> pop_top();
#endif
          sleep[v] = CLAIMED; nclaimed++; got_v = true;
          inflight++;
#ifdef FIX_COUNT_UNDER_LOCK
          idle = idle + ONE_U + ONE_S; pending++; inflight--;
          printf("%c%d S4 claims w%d and counts its wake, under the lock", WHO, v); STATE
#else
          printf("%c%d S4 claims w%d\n", WHO, v)
#endif
#if defined(FIX_COUNT_UNDER_LOCK) && !defined(SPEC_NO_S3_RECHECK)
       :: SRCH(idle) == 0 && UNP(idle) < N && sp == 0 -> printf("%c%d S4 finds no sleeper\n", WHO)
#else
       :: else -> printf("%c%d S4 finds no sleeper\n", WHO)
#endif
#ifdef COUNT_THEN_CLAIM
          ; inflight++                            /* ghost: the counted wake has nobody */
#endif
       fi
     };
     if
     :: got_v ->
#if !defined(COUNT_THEN_CLAIM) && !defined(FIX_COUNT_UNDER_LOCK)
        count_wake();
#endif
        unpark_v()
     :: else -> skip
     fi
  fi;
  s = 0; v = 0; got_v = false
}

/* T1 transition_to_searching: ok = whether this worker now searches. */
inline t1() {
  if
  :: wsearching[me] -> ok = true
  :: else ->
     s = idle;
     do
     :: 2 * SRCH(s) >= N ->
        atomic { ok = false; printf("w%d T1 fails: searching %d\n", me, SRCH(s)) };
        break
     :: else ->
        atomic {
          if
          :: idle == s -> idle = idle + ONE_S; wsearching[me] = true; nsearching++; ok = true;
             printf("w%d T1 starts searching", me); STATE
          :: else -> s = idle
          fi
        };
        if :: ok -> break :: else -> skip fi
     od;
     s = 0
  fi
}

#if LONG_IO > 0
#define TAKE_LONG(k) \
  if \
  :: longq[k] > 0 -> longq[k]--; mylong = true \
  :: else -> skip \
  fi
#else
#define TAKE_LONG(k) skip
#endif

inline steal() {
  atomic {
    if
    :: gq > 0 -> gq--; got = true; printf("w%d steals from global_\n", me)
    :: me != 0 && lq[0] > 0 ->
       lq[0]--; got = true; taken_by_other = true; printf("w%d steals from w0\n", me);
       TAKE_LONG(0)
    :: me != 1 && lq[1] > 0 -> lq[1]--; got = true; printf("w%d steals from w1\n", me);
       TAKE_LONG(1)
    :: N > 2 && me != 2 && lq[2] > 0 -> lq[2]--; got = true; printf("w%d steals from w2\n", me);
       TAKE_LONG(2)
    :: else -> skip
    fi
  }
}

/* the deferred wake decision at an item's end */
inline item_end() {
  if
  :: deferred ->
     deferred = false;
     if
     :: lq[me] + gq > 1 -> notify()
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* dispatch of r reaped completions: the first to our own local queue (we run it next), the
   rest to global_ with a notify if there are any. */
inline dispatch() {
  if
  :: r > 0 ->
     atomic {
       lq[me]++; r--; printf("w%d dispatch: 1 to its own queue\n", me);
#if LONG_IO > 0
       if
       :: long_left > 0 -> long_left--; longq[me]++; printf("w%d dispatch: that one is long\n", me)
       :: else -> skip
       fi
#endif
     };
     if
     :: r > 0 ->
        atomic { gq = gq + r; printf("w%d dispatch: %d to global_\n", me, r); r = 0 };
        notify()
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* A wait() that returns (part of the caller's atomic step): reaps what is ready (all, or one
   of several: a batch), and consumes the unpark flag (or leaves it, when it reaped). */
inline reap() {
  if
  :: io_ready[me] > 0 -> r = io_ready[me]
  :: io_ready[me] > 1 -> r = 1
  :: io_ready[me] == 0 -> r = 0
  fi;
  io_ready[me] = io_ready[me] - r;
  if
  :: uflag[me] -> uflag[me] = false
  :: uflag[me] && r > 0 -> skip
  :: !uflag[me] && r == 0 -> spur_left--         /* a spurious return */
  :: !uflag[me] && r > 0 -> skip
  fi
}

/* taking up a claim, under the lock: its waker counted us unparked and searching */
#define TAKE_CLAIM \
  sleep[me] = AWAKE; nclaimed--; pending--; asleep[me] = false; nasleep--; \
  wsearching[me] = true; nsearching++; cw = true

active [N] proctype worker() {
  byte me = _pid;
  int s;
  byte v, r, i;
  bool got, got_v, ok, q, cw, done, deferred;
#if LONG_IO > 0
  bool mylong;
#endif

  if
#ifndef NO_LONG_ITEM
  :: me == 0 ->
     /* the long item ("bug 6"): queues two items locally, runs until another took one */
     atomic { inlong[0] = true; lq[0]++; printf("w0 S1 long item queues 1 locally (wake deferred)\n") };
     deferred = true;
     atomic { lq[0]++; printf("w0 S1 long item queues 2 locally (surplus: notify)\n") };
     notify();
end_long0:                                       /* (a valid end only for stop(): the */
     taken_by_other;                             /* watchdog asserts long_done otherwise) */
     atomic { long_done = true; inlong[0] = false; printf("w0 long item ends\n") };
     item_end()
#endif
  :: else -> skip
  fi;

top:
  if
  :: stopping -> goto left
  :: else -> skip
  fi;
  atomic {
    if
    :: lq[me] > 0 -> lq[me]--; got = true; printf("w%d pops its own queue\n", me); TAKE_LONG(me)
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
  :: !got -> t1(); if :: ok -> ok = false; steal() :: else -> skip fi
  :: else -> skip
  fi;
  if
  :: !got && !stopping ->                        /* spin_for_work: one probe, or none */
     t1();
     if
     :: ok -> ok = false;
        if
        :: steal()
        :: skip
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
  :: wsearching[me] ->                           /* T2 */
     atomic {
       wsearching[me] = false; nsearching--;
       s = idle; idle = idle - ONE_S;            /* prev = fetch_sub(searching 1) */
       printf("w%d T2 stops searching", me); STATE
     };
     if
     :: SRCH(s) == 1 -> s = 0; notify()
     :: else -> s = 0
     fi
  :: else -> skip
  fi;
#if LONG_IO > 0
  if
  :: mylong -> atomic { inlong[me] = true; printf("w%d runs a long item, for ever\n", me); goto end_long }
  :: else -> skip
  fi;
#endif
  if
  :: atomic { spawn_left > 0 -> spawn_left--; lq[me]++; printf("w%d S1 item queues 1 locally\n", me) };
     deferred = true
  :: skip
  fi;
  item_end();
  /* look: wait(0) into its own parker, dispatch what it reaped */
  if
  :: skip
  :: atomic {
       r = io_ready[me]; io_ready[me] = 0; uflag[me] = false;
       printf("w%d looks: wait(0) reaps %d\n", me, r)
     };
     dispatch()
  fi;
  goto top;

park:
#if !defined(PUSH_AFTER_P1) && !defined(PUSH_AFTER_P2)
  atomic {
    push_me(); sleep[me] = ASLEEP; prepark[me] = true;
    printf("w%d R0 pushes itself on the stack\n", me)
  };
#endif
  atomic {                                       /* P1 */
    if
    :: wsearching[me] -> idle = idle - ONE_U - ONE_S; wsearching[me] = false; nsearching--
    :: else -> idle = idle - ONE_U
    fi;
    asleep[me] = true; nasleep++; prepark[me] = false;
    printf("w%d P1 parks", me); STATE
  };
#ifdef PUSH_AFTER_P1
  atomic { push_me(); sleep[me] = ASLEEP; printf("w%d R0 (after P1) pushes itself\n", me) };
#endif
#ifdef FIX_STOP
  if
  :: stopping -> atomic { printf("w%d P2 sees stopping: withdraws\n", me) }; goto withdraw
  :: else -> skip
  fi;
#endif
#ifndef NO_P2_RECHECK
  q = (gq > 0);                                  /* P2: fence; anything_queued() */
  if :: !q -> q = (lq[0] > 0) :: else -> skip fi;
  if :: !q -> q = (lq[1] > 0) :: else -> skip fi;
  atomic {
    if :: !q && N > 2 -> q = (lq[2] > 0) :: else -> skip fi;
    printf("w%d P2 rechecks: something to do %d\n", me, q);
    if :: !q -> inp4[me] = true :: else -> skip fi
  };
#ifdef PUSH_AFTER_P2
  atomic { push_me(); sleep[me] = ASLEEP; printf("w%d R0 (after P2) pushes itself\n", me) };
#endif
  if
  :: q ->                                        /* P3: load idle_state_, decide */
     q = false;
     atomic {
       s = idle;
       if
       :: SRCH(s) != 0 || UNP(s) >= N -> printf("w%d P3 covered: to P4\n", me); inp4[me] = true
       :: else -> q = true
       fi;
       s = 0
     };
     if :: q -> q = false; goto withdraw :: else -> skip fi
  :: else -> skip
  fi;
#else
  inp4[me] = true;                               /* (the mutant: straight to P4) */
#endif

p4:
end_p4:
  atomic {                                       /* P4: parker.wait() */
    uflag[me] || io_ready[me] > 0 || spur_left > 0 ->
    reap(); inp4[me] = false;
    printf("w%d P4 wait returns, reaps %d\n", me, r)
  };
  atomic {                                       /* lock; look at sleep */
    if
    :: sleep[me] == CLAIMED -> TAKE_CLAIM; printf("w%d claimed: awake, searching", me); STATE
    :: else -> skip
    fi
  };
  if
  :: cw -> cw = false; dispatch(); goto top
  :: else -> skip
  fi;
  if
  :: r == 0 && io_ready[me] == 0 ->              /* nothing: back to P4, or withdraw */
     if
     :: atomic { printf("w%d back to P4\n", me); inp4[me] = true }; goto p4
     :: skip
     fi
  :: else -> skip
  fi;

withdraw:
  atomic {                                       /* lock */
#ifndef WITHDRAW_IGNORES_CLAIM
    if
    :: sleep[me] == CLAIMED -> TAKE_CLAIM; printf("w%d withdraws: claimed, searching", me); STATE
    :: else ->
#endif
#ifdef WITHDRAW_IGNORES_CLAIM
       if :: sleep[me] == CLAIMED -> nclaimed-- :: else -> skip fi;     /* ghost: it is AWAKE now */
#endif
       remove_me(); sleep[me] = AWAKE; printf("w%d withdraws: off the stack\n", me)
#ifndef WITHDRAW_IGNORES_CLAIM
    fi
#endif
  };
  if
  :: !cw ->                                      /* count itself back in */
     atomic { s = idle };
     do
     :: atomic {
          if
          :: idle == s ->
             if
             :: SRCH(s) == 0 && IO_WAKE_MAY_SEARCH ->
                idle = idle + ONE_U + ONE_S; wsearching[me] = true; nsearching++;
                printf("w%d withdraw counts itself in, searching", me)
             :: else -> idle = idle + ONE_U;
                printf("w%d withdraw counts itself in, not searching", me)
             fi;
             asleep[me] = false; nasleep--; done = true; STATE
          :: else -> s = idle
          fi
        };
        if :: done -> break :: else -> skip fi
     od;
     done = false; s = 0
  :: else -> cw = false
  fi;
  dispatch();
  goto top;

#if LONG_IO > 0
end_long:                                        /* a long item, beyond the scenario's end */
  false;
#endif
left:
#ifdef STOP
  atomic { nleft++; printf("w%d leaves\n", me) }
#else
  skip
#endif
}

active proctype producer() {
  int s;
  byte v, n;
  bool got_v;
  do
  :: n < PRODUCED ->
     n++;
     atomic { gq++; printf("x%d S1 pushes to global_\n", _pid) };
     notify()
  :: else -> break
  od
}

#ifdef STOP
/* stop(): stopping set, then every sleeper claimed (its wake counted) and unparked; then the
   join. */
active proctype stopper() {
  byte v, k;
  bool got_v;
  atomic { stopping = true; printf("s%d stop: stopping set\n", _pid) };
  do
  :: atomic {
       sp > 0 -> pop_top(); sleep[v] = CLAIMED; nclaimed++; inflight++; got_v = true;
#ifdef FIX_COUNT_UNDER_LOCK
       idle = idle + ONE_U + ONE_S; pending++; inflight--;
       printf("s%d stop claims w%d and counts its wake, under the lock\n", _pid, v)
#else
       printf("s%d stop claims w%d\n", _pid, v)
#endif
     };
#ifndef FIX_COUNT_UNDER_LOCK
     count_wake();
#endif
     unpark_v(); got_v = false
  :: atomic { sp == 0 -> printf("s%d stop: no sleeper left\n", _pid) }; break
  od;
end_join:
  atomic { nleft + (inlong[0] -> 1 : 0) + (inlong[1] -> 1 : 0) + (inlong[2] -> 1 : 0) == N ->
           stop_done = true; printf("s%d stop: joined\n", _pid) }
}
#endif

active proctype io() {
end_io:
  do
  :: atomic { (IO_MASK & 1) && io_left[0] > 0 -> io_left[0]--; io_ready[0]++; printf("i%d IO ready for w0\n", _pid) }
  :: atomic { (IO_MASK & 2) && io_left[1] > 0 -> io_left[1]--; io_ready[1]++; printf("i%d IO ready for w1\n", _pid) }
  :: atomic { N > 2 && (IO_MASK & 4) && io_left[2] > 0 -> io_left[2]--; io_ready[2]++; printf("i%d IO ready for w2\n", _pid) }
  od
}

#ifndef NO_INVARIANTS
active proctype invariants() {
end_inv:
  atomic {
    !(INV_PHANTOM && INV_UNPARKED && INV_SEARCHING && INV_COUNTED && INV_CLAIMS && INV_STACK) ->
      assert(INV_STACK);
      assert(INV_COUNTED);
      assert(INV_UNPARKED);
      assert(INV_SEARCHING);
      assert(INV_PHANTOM);
      assert(INV_CLAIMS)
  }
}
#endif

#define IO_OK(w) (io_ready[w] == 0 || inlong[w] || !inp4[w])
#define SLEEPING (inp4[0] || inp4[1] || inp4[2])
active proctype watchdog() {
end_wd:
  atomic {
    timeout ->
#ifdef STOP
    assert(!SLEEPING)                            /* stop() leaves nobody asleep */
#else
    assert(long_done);                           /* the long item's items were taken */
    assert(!SLEEPING || (gq == 0 && lq[0] == 0 && lq[1] == 0 && lq[2] == 0));
    assert(IO_OK(0) && IO_OK(1) && IO_OK(2))     /* no IO ready for a worker asleep in P4 */
#endif
  }
}
