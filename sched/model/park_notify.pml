/*
 * park_notify.pml — the scheduler's park/notify handshake (sched/src/scheduler.cpp).
 *
 * WHAT IS MODELLED, step for step with scheduler.cpp (each step carries the code's name):
 *   idle_state_  the pair (unparked, searching), changed only by atomic steps, as the packed
 *                word is (fetch_add/fetch_sub/compare_exchange); with -DDRIVER also bit 31,
 *                the driver bit (dbit), part of the same word: every CAS compares it too.
 *   sleepers_    the LifoSemaphore, as a counting semaphore: release(1) adds a signal (S4),
 *                wait() takes one or blocks (P4). Which waiter wakes (LIFO) does not matter,
 *                nor does nudge() (a paused test clock's Scheduler::nudge_sleepers()): a
 *                nudged waiter wakes and blocks again inside wait(), taking no signal and
 *                changing no count here (the semaphore's own tests check that).
 *   queues       lengths only: global_ (gq) and each worker's LocalQueue (lq[i]).
 *   submitter    notify_parked(): S1 push, S2 fence + load, S3 check-and-CAS loop, S4 release.
 *   worker       run_worker(): find_work (own local queue, global queue, steal_work),
 *                spin_for_work, park() (P1..P4), T1 transition_to_searching, T2
 *                transition_from_searching, and the wake deferral of submit()/run_worker.
 *   The NEW park() is the default; -DOLD_PROTOCOL gives the old one (HEAD before the fix),
 *   whose P3 on finding work did `unparked += 1` and returned, not searching.
 *
 * THE DRIVER (-DDRIVER; sched/driver.hpp and the driver steps of scheduler.cpp):
 *   poll right   poll_right_ (right): try_take_poll_right() is one exchange step (with DETACH
 *                its seq_cst re-look at driver_ is a step of its own, and a right taken with
 *                no driver is released). release_poll_right(): the store, then the
 *                handover (below).
 *   driver       Driver::wait() as a sticky binary unpark flag plus an IO source: wait(-1)
 *                blocks until the flag is set or a completion is ready, wait(0) never blocks;
 *                a wait reaps all ready completions or (a full batch) one, and drains the flag,
 *                or leaves it set if it did not fit in the batch. unpark() sets the flag (an
 *                eventfd write). The IO source makes IO (default 2) completions ready while the
 *                driver is attached; only the right's holder turns them into items, by a wait
 *                and dispatch(): the first to its own local queue with its wake deferred
 *                (submit, prefer_local), the rest to global_ with a notify (submit_batch),
 *                then the deferred decision, as at an item's end.
 *   D1           park(): a worker that takes the right sets the driver bit in the P1 step.
 *   P2 rechecks  after the fence, in the code's order: driver_appeared (a parker that saw no
 *                driver sees one now; FIX_ATTACH) and right_freed (a parker that saw the right
 *                taken sees it free now, and a driver), each taken as queued work (P3); then
 *                anything_queued().
 *   handover     release_poll_right(), after its store: notify_parked(), by S3's rule: a
 *                sleeper is woken unless someone searches or all are awake, or (a handover's
 *                own rule) a worker already sleeps in the driver. Every release in
 *                the model goes through it (polls, looks, P3, D3, a re-look that finds no
 *                driver). It is what keeps a holder that goes on to run a long item from
 *                leaving the kernel unwatched while another worker sleeps on the semaphore.
 *   P3 (holder)  claimed (bit already cleared by a waker): back, searching, right released;
 *                else covered: to the driver; else count itself in by S3's rule, the same CAS
 *                clearing the bit, and release the right.
 *   D2           notify_parked() (S3): with the bit set and only one worker asleep, the CAS
 *                that counts the wake also clears the bit (claims the driver's sleeper), and S4
 *                is unpark_driver() (unparkers_, driver_ load, unpark()); otherwise S4 releases
 *                the semaphore as before.
 *   D3           leave_driver(), after the wait: bit cleared, claimed (searching); else a CAS
 *                that clears the bit and counts itself unparked, and searching if nobody
 *                searched (-DBUGGY_D3_NOT_SEARCHING: never, the code before SchedulerDriver.
 *                AnUnparkWithNothingReapedWakesNobodyElse). Then dispatch() and
 *                release_poll_right() (its handover is covered by the searcher: us, parking
 *                back into the driver or waking a sleeper at T2, or another), and back to
 *                run_worker's loop.
 *   polls        run_worker(): a worker out of work takes the right if free, polls (wait(0),
 *                dispatch), releases it and looks for work once more before spinning; after
 *                any item (kPollInterval: every 61st, here any one) a worker may poll likewise.
 *   engine       -DATTACH: the driver starts detached and attach_driver() (driver_ set, then
 *                notify_parked()) runs concurrently. -DDETACH: detach_driver() (driver_
 *                cleared, then unpark() until the right is free and unparkers_ is 0) runs
 *                concurrently; the holder's reload of driver_ in wait_in_driver() and
 *                poll_without_waiting() is checked (assert), and every use of the driver after
 *                detach_driver() returned.
 *   Not modelled: poll_driver() (from inside an item; but see -DLOOK_LONG), timers' timeouts
 *   (a wait that returns with nothing is covered by the stale unpark flag), stop(), spares and
 *   blocking regions
 *   (blocked_ = 0 and started_ = N, so S3's "enough awake" is unparked >= N).
 *
 * SCENARIO: WORKERS (2 or 3) workers, all started (no spares, no blocking regions, no stop).
 *   Worker 0 starts inside a long item (the "bug 6" shape): it submits two items to its own
 *   local queue (the first defers its wake to the item's end, the second notifies at once, as
 *   submit() does) and then keeps running until another worker has taken one of them
 *   (-DNO_LONG_ITEM: it starts idle like the others). The last ASLEEP (default 0) workers
 *   start asleep in P4. A producer outside the pool submits PRODUCED (default 1) items to the
 *   global queue (S1..S4), racing with the workers' park/notify. Up to SPAWN (default 1)
 *   ordinary items may, when run, queue one item to their own worker's local queue ("queue
 *   one, then return"). With the driver, IO completions are further items, and:
 *   -DLONG_IO=k    the first k items that reaps dispatch to the reaper's own local queue (the
 *                  one it runs next) are long: whoever takes one runs it for ever (label
 *                  end_long), an item longer than anything else in the scenario. So the
 *                  others must watch the kernel meanwhile: the handover.
 *   -DLOOK_LONG    a long item first calls poll_driver(): takes the right if free, wait(0),
 *                  dispatches (its wake decision deferred to an end it never reaches), and
 *                  releases the right; then runs for ever.
 *   -DBUSY_START   every worker that starts idle starts as if it had just run an item: it may
 *                  poll the driver first (a busy poll, whose holder is not searching).
 *   -DLONG_QUEUED=k (with BUSY_START) the item workers 0..k-1 just ran queued one long item
 *                  to their own local queue, its wake deferred (no surplus: no notify).
 *   A queue's long items are counted (longq[i]); an item taken from lq[i] while longq[i] > 0
 *   is a long one. That is exact in the scenarios run, where such a queue holds nothing else.
 *
 * MEMORY MODEL: Promela is sequentially consistent. That is what the seq_cst fences at S2 (in
 *   notify_parked) and P2 (in park) give the accesses they order: the queue push/pops and the
 *   idle_state_ read-modify-writes and loads (all seq_cst RMWs or fenced). So the Dekker pair
 *   "S1 push; S2 load idle_state_" / "P1 RMW idle_state_; P2 read the queues" is checked under
 *   SC, which is exactly what the fences are there to provide. The driver's atomics that
 *   order anything (the right's exchange, the re-look at driver_, driver_ and unparkers_ in
 *   unpark_driver() and detach_driver()) are seq_cst in the code; the relaxed first looks in
 *   try_take_poll_right() are taken as SC too, which only hides behaviour (see ATTACH below).
 *   The handover is a Dekker pair of its own: the release's "poll_right_ store; S2 fence;
 *   load idle_state_" against the parker's "P1 RMW idle_state_; P2 fence; load poll_right_"
 *   (right_freed): either the release sees the parker asleep, or the parker sees the right
 *   free. The fences make it exact under SC, whatever the store's order (the code's is release;
 *   poll_right_release.pml checks the pair under x86-TSO and finds it broken without S2's
 *   fence).
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
 *   - A dispatched "completion" stands for one event tree (submit_event_trees packs up to
 *     max_tree events into one): r reaped completions make r items.
 *   - Bounded work (2 + PRODUCED + SPAWN + IO items) keeps the state space finite and small.
 *
 * GHOST STATE (not in the code; only for the properties):
 *   nasleep/asleep[i]  workers between P1 and their return from P4 that did not re-join at P3
 *                      (with the driver: or from the driver, at D3 or at the holder's P3)
 *   pending            wakes counted at S3 whose signal no wait() has consumed yet
 *                      (= signals in sleepers_ + wakes counted but not yet released at S4;
 *                      with the driver also the claim of D2, until its sleeper takes it up)
 *   nsearching         workers whose Worker::searching is set
 *   claimed            a wake counted at D2 for the driver's sleeper, not taken up yet
 *   drv_sleeper        the worker between D1 and leaving the driver (pid + 1, 0: none)
 *   nholders, rholder  threads holding the poll right, and which
 *   freed              detach_driver() has returned
 *
 * PROPERTIES:
 *   1. No phantom searcher (safety; monitor `invariants`, checked in every reachable state):
 *        pending   <= nasleep                  every pending wake has a sleeper to consume it
 *        unparked  == (N - nasleep) + pending
 *        searching == nsearching + pending
 *      The OLD protocol violates the first: after its P3 a worker leaves the asleep set while a
 *      wake counted for it stays pending, a searcher that fills the searcher cap (T1) with
 *      nobody behind it. With the driver, the driver's sleeper counts as asleep, and also:
 *        pending - claimed <= nasleep - (drv_sleeper ? 1 : 0)   a semaphore wake has a
 *                                                               semaphore sleeper
 *        driver bit => drv_sleeper is the right's holder (between D1 and D3), not claimed
 *        claimed    => drv_sleeper is still there, and the bit is clear
 *        at most one thread holds the poll right, and the driver's sleeper is that thread
 *   2. No lost wakeup / no deadlock / nothing stranded (safety; `watchdog` + invalid end
 *      states): when nothing can move (timeout), every queue is empty and the long item has
 *      finished, and (with the driver) no IO completion is ready un-reaped while the driver is
 *      attached. Workers asleep in P4 or in the driver's wait are valid end states (labels
 *      end_p4, end_drv), and so are workers running a LONG_IO / LONG_QUEUED item (end_long):
 *      with fewer long items than workers, a completion left ready then means that a worker
 *      sleeps on the semaphore while nobody holds the right or waits in the driver, and the
 *      completion waits for a long item to end. With DETACH: no null driver_ reloaded by a
 *      holder, no use of the driver after detach_driver() returned (asserts).
 *   3. Progress (liveness; -DNP, pan -l): every cycle takes an item (label progress_took).
 *      The NEW protocol has no non-progress cycle even without fairness. In the OLD protocol
 *      the idle worker loops P1, P2, P3 (unparked += 1), T1 (fails: the phantom holds the
 *      searcher cap) forever while the long item waits for it. That search uses weak fairness
 *      (pan -f), so that the cycle found is one in which every other process is blocked (the
 *      long item at its guard, the producer done), not one that merely never schedules them.
 *
 * WHAT THE DRIVER RUNS FOUND in scheduler.cpp as of the commit that added the driver (both fixed
 *   since; the fixes, FIX_ATTACH and FIX_DETACH, are the default, and -DBUGGY_ATTACH /
 *   -DBUGGY_DETACH bring the old code back, which check.sh expects to fail):
 *   - ATTACH: attach_driver() can leave every worker asleep on the semaphore with the driver
 *     attached, so IO completions are never reaped. A parker reads driver_ (null) in
 *     try_take_poll_right() before its P1; attach_driver() then sets driver_, and its
 *     notify_parked() returns at S3 because that very parker still counts as searching (or as
 *     unparked); the parker's P1, P2 (nothing queued) and P4 follow. Fix (FIX_ATTACH): a parker
 *     that saw no driver looks at driver_ again after the P2 fence and treats a driver attached
 *     since as queued work (P3), the Dekker pair "driver_ store; S2" / "P1; P2 driver_ load".
 *   - DETACH: wait_in_driver() and poll_without_waiting() reload driver_ after the right was
 *     taken; detach_driver() clears driver_ before it waits for the right, so the reload can
 *     be null (a null Driver* called). Fix (FIX_DETACH): use the Driver* try_take_poll_right()
 *     saw, which detach_driver() keeps valid until the right is released.
 *
 * WHAT THE RIGHT'S RELEASE RUNS FOUND. The handover is the third design; the model rejected the
 *   first two, each in a scenario check.sh still runs (all three now pass):
 *   - No handover at all (-DBUGGY_NO_HANDOVER): a holder in a busy poll (not searching) reaps,
 *     releases and runs the reaped item long, while the worker that parked because it held the
 *     right sleeps on (D0 scenario); so does one that parked before attach_driver() (ATTACH).
 *   - "Wishes": a parker that found the right taken raised right_wanted_ and looked again; a
 *     release woke a sleeper only if it saw a wish, and then cleared it. Each way of clearing
 *     failed. Taken before the wake and restored if nobody was woken: a second release in the
 *     window missed it (RACE scenario: three workers, two long items). Cleared by a store after
 *     a wake: a wish made meanwhile was erased (LOOK scenario: long items that look into the
 *     driver first). A count cleared by a compare-exchange from the value seen: its ABA, and
 *     one wake clearing every wish it saw though the woken worker took the right only for a
 *     look (LOOK again, 4 and 32 million states).
 *   - A handover that ignores searchers (wakes whenever someone sleeps and nobody is in the
 *     driver): two idle workers wake each other for ever, each one's out-of-work poll waking
 *     the other as it parks (a non-progress cycle, D0 scenario with -DNP). S3's rule has none:
 *     a worker that polls on its way to park searches, or someone else does.
 *   - Without right_freed (-DBUGGY_NO_RIGHT_RECHECK), the handover itself fails: its S3 sees
 *     the parker still awake (before its P1) and declines, nobody releases again, and the
 *     parker sleeps although the right came free after its look (D0, RACE, LOOK).
 *   SchedulerDriver.TwoRacingReleasesLeaveSomeoneInTheKernel and AParkDuringAReleasesWakeIs
 *   SeenByTheNextRelease (tests/sched/driver_test.cpp) force the RACE and LOOK interleavings
 *   with test hooks; WorkerPolling.AnIdleWorkerReapsWhileTheOtherRunsALongItem fails without
 *   the handover.
 *
 * HOW TO RUN: `make model` (sched/model/check.sh, which works in a temporary directory):
 *   spin -a -DWORKERS=2 park_notify.pml && cc -O2 -o pan pan.c && ./pan -m100000
 *   spin -a -DWORKERS=2 park_notify.pml && cc -O2 -DNP -o pan pan.c && ./pan -m100000 -l
 *   -DOLD_PROTOCOL (to spin) for the old park(); -DPRODUCED=n, -DSPAWN=n change the workload;
 *   -DDRIVER (-DIO=n, -DNO_LONG_ITEM, -DASLEEP=n, -DLONG_IO=k, -DBUSY_START, -DLONG_QUEUED=k),
 *   -DATTACH, -DDETACH add the driver; -DBUGGY_NO_HANDOVER, -DBUGGY_NO_RIGHT_RECHECK take a
 *   step of the right's release out; -DLOOK_LONG long items call poll_driver() first.
 *   The old protocol's livelock: cc -DNP ... && ./pan -m100000 -l -f -A (-A: skip the asserts).
 *   Replay a counterexample: spin -t [same -D flags] park_notify.pml prints its interleaving
 *   as one line per step ("w1 P1 parks -> idle_state_ (...)"; w<i> worker i, x<N> producer,
 *   i<pid> the IO source, e<pid> the engine); add -p for every statement.
 */

/* The fixes of ATTACH and DETACH (below) are in scheduler.cpp: they are the model's default;
   -DBUGGY_ATTACH / -DBUGGY_DETACH model the code before them. */
#if defined(ATTACH) && !defined(BUGGY_ATTACH)
#define FIX_ATTACH
#endif
#if defined(DETACH) && !defined(BUGGY_DETACH)
#define FIX_DETACH
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
#if defined(ATTACH) || defined(DETACH)
#ifndef DRIVER
#define DRIVER
#endif
#endif
#ifndef IO
#define IO 2
#endif
#ifndef ASLEEP
#define ASLEEP 0
#endif
#ifndef LONG_IO
#define LONG_IO 0
#endif
#ifndef LONG_QUEUED
#define LONG_QUEUED 0
#endif
#if LONG_IO > 0 || LONG_QUEUED > 0
#define LONGS
#endif
/* idle_state_: (unparked, searching). All N workers but the last ASLEEP start awake, none
   searching; those start asleep in P4. */
byte unparked = N - ASLEEP;
byte searching = 0;
byte sem = 0;        /* sleepers_: signals not yet consumed */
byte gq = 0;         /* global_ queue length */
byte lq[3];          /* local queue lengths (index < N used) */
bool wsearching[3];  /* Worker::searching */
byte spawn_left = SPAWN;
bool taken_by_other = false;  /* another worker took an item of worker 0's local queue */
#ifdef NO_LONG_ITEM
bool long_done = true;        /* no long item */
#else
bool long_done = false;       /* the long item has finished */
#endif

/* ghost state, see the top comment */
bool asleep[3];
byte nasleep = ASLEEP;
byte pending = 0;
byte nsearching = 0;

#ifdef DRIVER
/* the driver (sched/driver.hpp), see the top comment */
#ifdef ATTACH
bool attached = false;  /* driver_ != nullptr: attached later, by the engine */
#else
bool attached = true;   /* driver_ != nullptr */
#endif
bool right = false;     /* poll_right_ */
bool dbit = false;      /* idle_state_'s driver bit (kDriverAsleep) */
bool unpark_flag = false;  /* the driver's sticky unpark (an eventfd's count) */
byte io_left = IO;      /* completions the IO source has yet to produce */
byte io_ready = 0;      /* completions ready in the kernel, not reaped by any wait yet */
byte unparkers = 0;     /* unparkers_ */
bool handing[3];        /* worker i's notify_parked() is a release's handover */
byte long_left = LONG_IO;  /* reaped items still to be made long (see LONG_IO) */
byte longq[3];          /* long items queued in lq[i] */
/* ghost state */
byte nholders = 0;      /* threads holding the poll right */
byte rholder = 0;       /* the holder, as pid + 1 (0: none) */
byte drv_sleeper = 0;   /* the worker between D1 and leaving the driver, as pid + 1 (0: none) */
bool claimed = false;   /* a wake counted at D2 for the driver's sleeper, not yet taken up */
bool freed = false;     /* detach_driver() returned: the driver may be gone */
#endif

/* Trace output for `spin -t` replays (pan ignores printf); always inside an atomic step. */
/* who: w<i> is worker i, x<N> the external producer, e<pid> the engine (attach/detach) */
#define WHO   (_pid < N -> 'w' : (_pid == N -> 'x' : 'e')), _pid
#ifdef DRIVER
#define STATE printf( \
          " -> idle_state_ (unparked %d, searching %d, driver %d), pending %d, asleep %d\n", \
          unparked, searching, dbit, pending, nasleep)
#else
#define STATE printf(" -> idle_state_ (unparked %d, searching %d), pending %d, asleep %d\n", \
                     unparked, searching, pending, nasleep)
#endif

/* A loaded idle_state_ (s_u, s_s and, with the driver, s_d), and the CAS's comparison. */
#ifdef DRIVER
#define LOAD_WORD  s_u = unparked; s_s = searching; s_d = dbit
#define WORD_SAME  (unparked == s_u && searching == s_s && dbit == s_d)
#define FORGET     s_u = 0; s_s = 0; s_d = false
#else
#define LOAD_WORD  s_u = unparked; s_s = searching
#define WORD_SAME  (unparked == s_u && searching == s_s)
#define FORGET     s_u = 0; s_s = 0
#endif

#define INV_PHANTOM   (pending <= nasleep)
#define INV_UNPARKED  (unparked + nasleep == N + pending)
#define INV_SEARCHING (searching == nsearching + pending)
#ifdef DRIVER
#define DRV_ASLEEP    (drv_sleeper != 0 -> 1 : 0)
/* every wake counted for the semaphore has a sleeper on the semaphore's side */
#define INV_SEM_WAKE  (pending - claimed <= nasleep - DRV_ASLEEP)
/* the bit is set only while the right's holder is between D1 and D3, and not claimed */
#define INV_BIT       (!dbit || (drv_sleeper != 0 && drv_sleeper == rholder && !claimed))
/* a claim (D2) has its sleeper still to take it up, and cleared the bit */
#define INV_CLAIM     (!claimed || (drv_sleeper != 0 && !dbit))
/* at most one thread holds the poll right; the driver's sleeper holds it */
#define INV_RIGHT     (nholders <= 1 && right == (nholders == 1) && \
                       (drv_sleeper == 0 || drv_sleeper == rholder))
#define INV_DRIVER    (INV_SEM_WAKE && INV_BIT && INV_CLAIM && INV_RIGHT)
#else
#define INV_DRIVER    true
#endif

#ifdef DRIVER
/* unpark_driver(): unparkers_ += 1, load driver_, driver->unpark(), unparkers_ -= 1. */
inline unpark_driver() {
#ifdef DETACH
  atomic { unparkers++; d_seen = attached };
  atomic {
    if
    :: d_seen -> assert(!freed); unpark_flag = true;
       printf("%c%d S4 (D2) unparks the driver\n", WHO)
    :: else -> printf("%c%d S4 (D2) finds no driver\n", WHO)
    fi;
    unparkers--; d_seen = false
  }
#else
  atomic { unpark_flag = true; printf("%c%d S4 (D2) unparks the driver\n", WHO) }
#endif
}
#endif

/* notify_parked(&woke): S2..S4, with D2. Uses the caller's locals s_u, s_s, woke (s_d,
   to_drv); leaves woke set if it counted a wake (the code's *woke), for release_right(). */
inline notify_woke() {
  atomic { LOAD_WORD };                         /* S2: fence(seq_cst); s = idle_state_.load() */
  do                                            /* S3 */
#ifdef DRIVER
  :: atomic { _pid < N && handing[_pid] && s_d -> printf("%c%d S3 returns: a worker is in the driver\n", WHO) };
     break                                      /* a handover, and the kernel is watched */
#endif
  :: atomic { s_s != 0 -> printf("%c%d S3 returns: searching %d\n", WHO, s_s) }; break
                                                /* a searcher (or a counted wake) covers it */
  :: atomic { s_s == 0 && s_u >= N -> printf("%c%d S3 returns: unparked %d\n", WHO, s_u) };
     break                                      /* enough workers awake */
  :: else ->
     atomic {                                   /* S3: CAS(s, s + (unparked 1, searching 1)) */
       if
       :: WORD_SAME ->
          unparked++; searching++; pending++; woke = true;
#ifdef DRIVER
          if
          :: s_d && N - s_u == 1 ->             /* D2: the driver's sleeper is the last one */
             dbit = false; claimed = true; to_drv = true;    /* asleep: the CAS claims it */
             printf("%c%d S3 (D2) counts a wake, claims the driver's sleeper", WHO)
          :: else -> printf("%c%d S3 counts a wake", WHO)
          fi;
#else
          printf("%c%d S3 counts a wake", WHO);
#endif
          STATE
       :: else -> LOAD_WORD                     /* failed: retry with the fresh value */
       fi
     };
     if
     :: woke ->
#ifdef DRIVER
        if
        :: to_drv -> unpark_driver()            /* S4 (D2): unpark_driver() */
        :: else -> atomic { sem++; printf("%c%d S4 release(1), signals %d\n", WHO, sem) }
        fi;
#else
        atomic { sem++; printf("%c%d S4 release(1), signals %d\n", WHO, sem) };
#endif
        break                                   /* S4: sleepers_.release(1) */
     :: else -> skip
     fi
  od;
  FORGET
#ifdef DRIVER
  ; to_drv = false
#endif
}

/* notify_parked() */
inline notify() {
  notify_woke();
  woke = false
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

/* An item taken from lq[k]: a long one while lq[k] holds one (see LONG_IO, LONG_QUEUED). */
#ifdef LONGS
#define TAKE_LONG(k) \
  if \
  :: longq[k] > 0 -> longq[k]--; mylong = true \
  :: else -> skip \
  fi
#else
#define TAKE_LONG(k) skip
#endif

/* One steal probe: any item of another worker's local queue, or of the global queue. */
inline steal() {
  atomic {
    if
    :: gq > 0 -> gq--; got = true; printf("%c%d steals from global_\n", WHO)
    :: me != 0 && lq[0] > 0 ->
       lq[0]--; got = true; taken_by_other = true; printf("%c%d steals from w0\n", WHO);
       TAKE_LONG(0)
    :: me != 1 && lq[1] > 0 -> lq[1]--; got = true; printf("%c%d steals from w1\n", WHO);
       TAKE_LONG(1)
    :: N > 2 && me != 2 && lq[2] > 0 -> lq[2]--; got = true; printf("%c%d steals from w2\n", WHO);
       TAKE_LONG(2)
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

#ifdef DRIVER
/* park()'s saw_driver; without ATTACH and DETACH driver_ is set for good, and it is true. */
#if defined(ATTACH) || defined(DETACH)
#define SAW_DRV saw_drv
#else
#define SAW_DRV true
#endif

/* release_poll_right(): the store, then the handover: notify_parked() (S2..S4, with D2), so
   that a holder going on to run items for long does not leave the kernel unwatched while a
   worker sleeps on the semaphore. -DBUGGY_NO_HANDOVER leaves it out. */
inline release_right() {
  atomic {
    right = false; holder = false; nholders--; rholder = 0; handing[me] = true;
    printf("w%d releases the poll right\n", me)
  };
#ifndef BUGGY_NO_HANDOVER
  notify();
#endif
  handing[me] = false
}

/* With DETACH: after an exchange that took the right, the seq_cst re-look at driver_ that
   pairs with detach_driver() (try_take_poll_right()); a right taken with no driver is
   released, by release_poll_right() (its handover included). */
inline relook() {
#ifdef DETACH
  if
  :: holder ->
     atomic {
       d_seen = attached;
       if
       :: !d_seen -> printf("w%d took the poll right, sees no driver: releases it\n", me)
       :: else -> skip
       fi
     };
     if
     :: !d_seen -> release_right()
     :: else -> d_seen = false
     fi
  :: else -> skip
  fi
#else
  skip
#endif
}

/* try_take_poll_right(): holder = whether we took it. The relaxed looks at driver_ and at the
   right, and the exchange, are one step; then (DETACH) the re-look. */
inline take_right() {
  atomic {
    if
    :: attached && !right -> right = true; holder = true; nholders++; rholder = me + 1;
       printf("w%d takes the poll right\n", me)
    :: !attached -> printf("w%d try_take_poll_right: no driver\n", me)
    :: else -> skip
    fi
  };
  relook()
}

/* A Driver::wait() that returns: what it reaps (r) and whether it drains the unpark. Part of
   the caller's atomic step. A full batch leaves completions ready; an unpark that did not fit
   in the batch stays set. */
inline reap() {
#ifdef DETACH
  assert(!freed);
#endif
  if
  :: io_ready > 0 -> r = io_ready
  :: io_ready > 1 -> r = 1
  :: io_ready == 0 || unpark_flag -> r = 0
  fi;
  io_ready = io_ready - r;
  if
  :: unpark_flag -> unpark_flag = false
  :: unpark_flag && r > 0 -> skip
  :: else -> skip
  fi
}

/* wait_in_driver() and poll_without_waiting() reload driver_ (the bug DETACH finds; with
   FIX_DETACH they use the driver try_take_poll_right() saw, as the fix would). */
#if defined(DETACH) && !defined(FIX_DETACH)
#define RELOAD_DRIVER \
  atomic { printf("w%d reloads driver_: %d\n", me, attached); assert(attached) };
#else
#define RELOAD_DRIVER
#endif

/* Driver::dispatch(): the first completion to our own local queue, its wake decision deferred
   (submit, prefer_local); the rest to global_ (submit_batch: S1 and a notify). */
inline driver_dispatch() {
  if
  :: r > 0 ->
     atomic {
       lq[me]++; r--; printf("w%d dispatch: S1 queues 1 locally (wake deferred)\n", me);
#if LONG_IO > 0
       if
       :: long_left > 0 -> long_left--; longq[me]++;
          printf("w%d dispatch: that one is long\n", me)
       :: else -> skip
       fi
#endif
     };
     deferred = true;
     if
     :: r > 0 ->
        atomic { gq = gq + r; printf("w%d dispatch: S1 pushes %d to global_\n", me, r); r = 0 };
        notify()
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* dispatch(), outside any item: Driver::dispatch(), then the deferred decision, as at an
   item's end. */
inline dispatch() {
  driver_dispatch();
  item_end()
}

/* poll_without_waiting(): wait(0) and dispatch, by the right's holder. */
inline poll() {
  RELOAD_DRIVER
  atomic { reap(); printf("w%d wait(0) reaps %d\n", me, r) };
  dispatch()
}

#ifdef LOOK_LONG
/* poll_driver() from inside a long item: poll_without_waiting(inside_item), whose dispatch
   leaves the deferred decision to the item's end, which a long item never reaches. */
inline look() {
  take_right();
  if
  :: holder ->
     RELOAD_DRIVER
     atomic { reap(); printf("w%d poll_driver: wait(0) reaps %d\n", me, r) };
     driver_dispatch();
     release_right()
  :: else -> skip
  fi
}
#endif

/* After an item: every kPollInterval items (any item here), if the right is free. */
inline busy_poll() {
  if
  :: skip
  :: take_right();
     if
     :: holder -> poll(); release_right()
     :: else -> skip
     fi
  fi
}
#endif

active [N] proctype worker() {
  byte me = _pid;    /* workers are declared first: pids 0..N-1 */
  byte s_u, s_s;     /* a loaded idle_state_ */
  bool got, ok, q, woke, deferred;
#ifdef DRIVER
  bool s_d, to_drv, d_seen, holder, saw_drv, polled;
  byte r;            /* completions reaped, not yet dispatched */
#endif
#ifdef LONGS
  bool mylong;       /* took a long item */
#endif

  if
#if ASLEEP > 0
  :: me >= N - ASLEEP -> asleep[me] = true; goto end_p4
#endif
#ifndef NO_LONG_ITEM
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
#ifdef DRIVER
     ; busy_poll()
#endif
#endif
#ifdef BUSY_START
  :: else ->                                     /* as if it had just run an item, which */
     if                                          /* (LONG_QUEUED) queued a long one locally */
     :: me < LONG_QUEUED ->
        atomic {
          lq[me]++; longq[me]++;
          printf("w%d S1 item queues a long one locally (wake deferred)\n", me)
        };
        deferred = true;
        item_end()
     :: else -> skip
     fi;
     busy_poll()
#else
  :: else -> skip
#endif
  fi;

top:
  /* find_work: own local queue, then the global queue, then steal_work */
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
  :: !got -> t1(); if :: ok -> ok = false; steal() :: else -> skip fi   /* steal_work */
  :: else -> skip
  fi;
#ifdef DRIVER
  if
  :: !got && !polled ->                          /* out of work: poll the driver, look again */
     take_right();
     if
     :: holder -> poll(); release_right(); polled = true; goto top
     :: else -> skip
     fi
  :: else -> skip
  fi;
#endif
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
#ifdef DRIVER
  polled = false;
#endif
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
#ifdef LONGS
  if
  :: mylong ->
#ifdef LOOK_LONG
     look();                                     /* its poll_driver(), then for ever */
#endif
     atomic { printf("w%d runs a long item, for ever\n", me); goto end_long }
  :: else -> skip
  fi;
#endif
  /* run the item: it may queue one item locally and return ("queue one, then return") */
  if
  :: atomic {                                   /* S1 (local push), first submit */
       spawn_left > 0 -> spawn_left--; lq[me]++; printf("w%d S1 item queues 1 locally\n", me)
     };
     deferred = true                             /* its wake deferred to the item's end */
  :: skip
  fi;
  item_end();
#ifdef DRIVER
  busy_poll();
#endif
  goto top;

park:
#ifdef DRIVER
  polled = false;
  take_right();                                  /* held = try_take_poll_right() */
#if defined(ATTACH) || defined(DETACH)
  atomic { saw_drv = holder || attached };       /* saw_driver: held || driver_.load() */
#endif
#endif
  atomic {                                       /* P1: idle_state_ -= (1, w.searching) */
    unparked--;
    if
    :: wsearching[me] -> searching--; wsearching[me] = false; nsearching--
    :: else -> skip
    fi;
    asleep[me] = true; nasleep++;
#ifdef DRIVER
    if
    :: holder -> dbit = true; drv_sleeper = me + 1;   /* D1: + driver bit, in the same step */
       printf("w%d P1+D1 parks, for the driver", me)
    :: else -> printf("w%d P1 parks", me)
    fi;
#else
    printf("w%d P1 parks", me);
#endif
    STATE
  };
  /* P2: fence(seq_cst); with the driver, driver_appeared and right_freed, in the code's order;
     then anything_queued(), which reads the queues one by one */
#ifdef DRIVER
#ifdef FIX_ATTACH
  /* The fix ATTACH calls for (driver_appeared): a parker that found no driver at
     try_take_poll_right() looks at driver_ again after the fence, and treats one attached
     since as queued work (P3). */
  if
  :: !holder && !saw_drv -> q = attached
  :: else -> skip
  fi;
#endif
#ifndef BUGGY_NO_RIGHT_RECHECK
  /* right_freed: a parker that found the right taken looks at it again after the fence,
     and treats it free (and a driver still there) as queued work (P3). */
  if
  :: !holder && SAW_DRV ->
     atomic { q = !right; printf("w%d P2 right_freed: right free %d\n", me, q) };
#ifdef DETACH
     if :: q -> q = attached :: else -> skip fi; /* && driver_.load() != nullptr */
#endif
     skip
  :: else -> skip
  fi;
#endif
#if defined(ATTACH) || defined(DETACH)
  saw_drv = false;
#endif
  if :: !q -> q = (gq > 0) :: else -> skip fi;
#else
  q = (gq > 0);
#endif
  if :: !q -> q = (lq[0] > 0) :: else -> skip fi;
  if :: !q -> q = (lq[1] > 0) :: else -> skip fi;
  atomic {
    if :: !q && N > 2 -> q = (lq[2] > 0) :: else -> skip fi;
    printf("w%d P2 rechecks: something to do %d\n", me, q)
  };
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
     atomic { LOAD_WORD };
     do
#ifdef DRIVER
     :: atomic {                                /* the holder, claimed by a waker (D2): it */
          holder && !s_d ->                     /* counted us in, searching: back */
          claimed = false; pending--; drv_sleeper = 0;
          asleep[me] = false; nasleep--; wsearching[me] = true; nsearching++; woke = true;
          printf("w%d P3 work queued, claimed (D2): back, searching", me); STATE
        };
        break
     :: atomic {                                /* covered by others: sleep (P4, driver) */
          !(holder && !s_d) && (s_s != 0 || s_u >= N) ->
          if
          :: holder -> printf("w%d P3 work queued, covered: to the driver\n", me)
          :: else -> printf("w%d P3 work queued, covered: to P4\n", me)
          fi
        };
        break
#else
     :: atomic {                                /* covered by others: sleep (P4) */
          s_s != 0 || s_u >= N -> printf("w%d P3 work queued, covered: to P4\n", me)
        };
        break
#endif
     :: else ->
        atomic {                                 /* P3: CAS(s, s + (unparked 1, searching 1) */
          if                                     /*             - the holder's driver bit) */
          :: WORD_SAME ->
             unparked++; searching++; wsearching[me] = true; nsearching++;
             asleep[me] = false; nasleep--; woke = true;
#ifdef DRIVER
             if
             :: holder -> dbit = false; drv_sleeper = 0
             :: else -> skip
             fi;
#endif
             printf("w%d P3 work queued: counts itself in, searching", me); STATE
          :: else -> LOAD_WORD
          fi
        };
        if :: woke -> break :: else -> skip fi
     od;
     FORGET;
     if
     :: woke -> woke = false;                    /* return, searching */
#ifdef DRIVER
        if
        :: holder -> release_right()
        :: else -> skip
        fi;
#endif
        goto top
     :: else -> skip
     fi
  :: else -> skip
  fi;
#endif
#ifdef DRIVER
  if
  :: holder ->                                   /* wait_in_driver() */
     RELOAD_DRIVER
end_drv:
     atomic {                                    /* driver->wait(-1) */
       unpark_flag || io_ready > 0 -> reap();
       printf("w%d wait(-1) returns, reaps %d\n", me, r)
     };
     atomic { LOAD_WORD };                       /* D3: s = idle_state_.load() */
     do
     :: atomic {                                /* claimed (D2): its waker counted us in */
          !s_d ->
          claimed = false; pending--; drv_sleeper = 0;
          asleep[me] = false; nasleep--; wsearching[me] = true; nsearching++;
          printf("w%d D3 leaves the driver, claimed: searching", me); STATE
        };
        break
     :: else ->
        atomic {                                 /* D3: CAS(s, s - driver bit + unparked 1 */
          if                                     /*        (+ searching 1 if none searches)) */
          :: WORD_SAME ->
             dbit = false; unparked++; drv_sleeper = 0; asleep[me] = false; nasleep--;
             woke = true;
#ifndef BUGGY_D3_NOT_SEARCHING
             if
             :: s_s == 0 ->
                searching++; wsearching[me] = true; nsearching++;
                printf("w%d D3 leaves the driver: counts itself in, searching", me)
             :: else ->
                printf("w%d D3 leaves the driver: counts itself in, not searching", me)
             fi;
#else
             printf("w%d D3 leaves the driver: counts itself in, not searching", me);
#endif
             STATE
          :: else -> LOAD_WORD
          fi
        };
        if :: woke -> woke = false; break :: else -> skip fi
     od;
     FORGET;
     dispatch();
     release_right();
     goto top
  :: else -> skip
  fi;
#endif
end_p4:
  atomic {                                       /* P4: sleepers_.wait() */
    sem > 0 -> sem--; pending--; asleep[me] = false; nasleep--;
    wsearching[me] = true; nsearching++;         /* the waker counted us as searching (S3) */
    printf("w%d P4 wakes, searching", me); STATE
  };
  goto top;
#ifdef LONGS
end_long:                                        /* a long item, beyond the scenario's end */
  false
#endif
}

/* An external submitter: submit() off the pool, PRODUCED items to the global queue. */
active proctype producer() {
  byte s_u, s_s, n;
  bool woke;
#ifdef DRIVER
  bool s_d, to_drv, d_seen;
#endif
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
    !(INV_PHANTOM && INV_UNPARKED && INV_SEARCHING && INV_DRIVER) ->
      assert(INV_UNPARKED);
      assert(INV_SEARCHING);
#ifdef DRIVER
      assert(INV_SEM_WAKE);
      assert(INV_BIT);
      assert(INV_CLAIM);
      assert(INV_RIGHT);
#endif
      assert(INV_PHANTOM)   /* no phantom searcher */
  }
}

/* Property 2: when nothing can move, no work is left behind (nor, with the driver, a
   completion un-reaped while the driver is attached). */
active proctype watchdog() {
end_wd:
  timeout ->
#ifdef DRIVER
    assert(long_done && gq == 0 && lq[0] == 0 && lq[1] == 0 && lq[2] == 0 &&
           (io_ready == 0 || !attached))
#else
    assert(long_done && gq == 0 && lq[0] == 0 && lq[1] == 0 && lq[2] == 0)
#endif
}

#ifdef DRIVER
/* The IO source: IO completions (or expired timers), while a driver is attached. Only the
   poll right's holder turns them into items, by a wait. */
active proctype io_source() {
end_io:
  do
  :: atomic {
       io_left > 0 && attached -> io_left--; io_ready++;
       printf("i%d IO completion ready, %d un-reaped\n", _pid, io_ready)
     }
  :: io_left == 0 -> break
  od
}
#endif

#if defined(ATTACH) || defined(DETACH)
/* The engine: attach_driver() (driver_ set, then notify_parked()) and detach_driver()
   (driver_ cleared, then unpark until nobody holds the right or is about to unpark). */
active proctype engine() {
  byte s_u, s_s;
  bool s_d, to_drv, woke, d_seen;
#ifdef ATTACH
  atomic { attached = true; printf("%c%d attach_driver: driver_ set\n", WHO) };
  notify();
#endif
#ifdef DETACH
  atomic { attached = false; printf("%c%d detach_driver: driver_ cleared\n", WHO) };
  do
  :: atomic { right || unparkers != 0 -> unpark_flag = true }  /* unpark(), yield */
  :: atomic {
       !right && unparkers == 0 -> freed = true;
       printf("%c%d detach_driver returns\n", WHO)
     };
     break
  od
#endif
}
#endif
