/*
 * spare_start.pml: when a spare worker is counted as started, against a submit from outside
 * the runtime (Scheduler::start_spare_if_needed(), sched/src/scheduler.cpp).
 *
 * S3 counts the sleepers as started_ - unparked. A spare is counted unparked (and searching)
 * before its thread runs, like a woken worker; the question is when started_ counts it. The
 * scenario, the smallest that shows it (the workers' park/notify protocol itself is
 * park_notify.pml's):
 *   worker W (the only one, N = 1) enters a BlockingRegion: blocked_++, S2 + S3 finds nobody
 *     asleep (started - unparked = 0), so it starts a spare: under the lifecycle lock,
 *     unparked++ and searching++, then started_++ and the thread (-DPUBLISH_AFTER_START: the
 *     thread, then started_++, the order before the fix). W then waits for the item.
 *   spare S: finds nothing, parks (P1: unparked--, searching--; P2: re-checks the queue; P3:
 *     back as a searcher by S3's rule if something is queued and nobody covers it; P4: sleeps
 *     on the semaphore), and when woken (counted in by its waker) searches again.
 *   submitter X (outside the runtime: spawn()): S1 pushes the item; S2 + S3: wakes a sleeper
 *     unless someone searches, enough are awake (unparked - blocked >= N) or nobody is asleep.
 * Interleavings are sequentially consistent here: the fences of S2 and P2 make every pair
 * that matters a Dekker pair (park_notify.pml), and started_'s release store is read with
 * acquire.
 *
 * PROPERTY (checked when nothing can move): the item ran. The failure it excludes is the item
 * queued, the spare asleep and no wake posted while W's region waits for the item
 * (BlockingRegion.ASpareThatParksBeforeItsStartIsPublishedIsWokenForWork; in the runtime, a
 * timer task that never ran while both workers blocked in regions, about 1 run in 300).
 *
 * RUN: sched/model/check.sh (by `make model`): the code passes (errors: 0); with
 * -DPUBLISH_AFTER_START spin finds the item stranded.
 */

#define N 1

byte unparked = 1;     /* idle_state_'s unparked count: W */
byte searching = 0;    /* idle_state_'s searching count */
byte started = 1;      /* started_ */
byte blocked = 0;      /* blocked_ */
byte queued = 0;       /* the global queue */
byte signals = 0;      /* the semaphore */
bool spare_thread = false;  /* the spare's thread exists (runs) */
bool ran = false;           /* the item ran */
bool submitted = false;

/* S2 + S3 + S4 of a notify: one load of idle_state_ (unparked and searching together), then
   blocked_ and started_; a CAS that counts the wake (retried if idle_state_ moved). `covered`
   is false if nobody was asleep to be woken. */
#define NOTIFY(covered) \
  do \
  :: atomic { su = unparked; ss = searching }; \
     if \
     :: ss != 0 -> covered = true; break \
     :: else -> skip \
     fi; \
     if \
     :: su - blocked >= N -> covered = true; break \
     :: else -> skip \
     fi; \
     if \
     :: started - su <= 0 -> covered = false; break \
     :: else -> skip \
     fi; \
     atomic { \
       if \
       :: unparked == su && searching == ss -> \
            unparked++; searching++; signals++; covered = true; break \
       :: else -> skip /* the CAS failed: load again */ \
       fi \
     } \
  od

active proctype W() {
  byte su, ss;
  bool covered;
  blocked++;
  NOTIFY(covered);
  if
  :: !covered ->
     atomic { unparked++; searching++ };   /* counted like a woken worker */
#ifdef PUBLISH_AFTER_START
     spare_thread = true;
     started++;
#else
     started++;
     spare_thread = true;
#endif
  :: else -> skip
  fi;
end_region:
  ran                                       /* the region waits for the item */
}

active proctype S() {
  byte su, ss;
  bool covered;
  spare_thread;
search:
  atomic {
    if
    :: queued > 0 -> queued--; ran = true; goto done
    :: else -> skip
    fi
  };
  atomic { unparked--; searching-- };       /* P1: the spare is counted searching */
  if                                        /* P2 re-check, P3 */
  :: queued > 0 ->
     atomic {
       if
       :: searching == 0 && unparked - blocked < N -> unparked++; searching++; goto search
       :: else -> skip
       fi
     }
  :: else -> skip
  fi;
end_asleep:
  atomic { signals > 0 -> signals-- };      /* P4: woken, counted in by the waker */
  goto search;
done:
  skip
}

active proctype X() {
  byte su, ss;
  bool covered;
  queued++;                                 /* S1 */
  NOTIFY(covered);
  submitted = true
}

active proctype watchdog() {
  atomic {
    timeout -> assert(!submitted || ran)
  }
}
