/*
 * poll_right_release.pml: why Scheduler::release_poll_right() stores poll_right_ seq_cst.
 *
 * The D0 handshake of sched/src/scheduler.cpp, alone, under x86-TSO (each thread's plain
 * stores wait in a FIFO store buffer; its own loads read that buffer first; a locked
 * instruction (xchg, lock cmpxchg, mfence) drains it). This is what the compilers emit for
 * the C++ orderings used: a seq_cst store is an xchg, a release store a plain mov, every load a
 * plain mov, every read-modify-write a locked instruction, a seq_cst fence an mfence.
 *
 *   holder (release_poll_right(), after a busy worker's look; it then runs items for long):
 *     poll_right_.store(false)             seq_cst: xchg   (-DRELEASE_STORE: release, a mov)
 *     if right_wanted_.load() && right_wanted_.exchange(false):
 *       notify_parked(): S2 fence, load idle_state_; S3 wakes the parker if it is asleep
 *       (P1 done), else the wake goes to nobody and the wish is stored back (seq_cst).
 *   parker (park(), with the right taken):
 *     D0  right_wanted_.store(true)        seq_cst: xchg
 *         poll_right_.exchange(true)       took it: done, it waits in the driver
 *     P1  idle_state_ RMW                   counted asleep
 *     P2  fence; right_freed = !poll_right_.load()   free: it takes it (P3), done
 *     P4  sleeps on the semaphore until woken.
 *
 * PROPERTY (checked when nothing can move): the parker holds the right or was woken. The
 * failure it excludes is a parker asleep on the semaphore with the right free and nobody in
 * the kernel while the holder runs a long item (the IO stall of
 * WorkerPolling.AnIdleWorkerReapsWhileTheOtherRunsALongItem, in a race window).
 *
 * With the seq_cst store it holds (0 errors); with -DRELEASE_STORE spin finds the violation:
 * the holder's store waits in its buffer while its load reads right_wanted_ still false, and
 * the parker's exchange and P2 load still see the right taken. This checks TSO, the model of
 * the machines the project runs on; for the C++ model the argument is the single total order
 * of seq_cst operations, in the comment of release_poll_right().
 *
 * RUN: sched/model/check_poll_right.sh (by `make model`), or by hand:
 *   spin -a poll_right_release.pml && cc -o pan pan.c && ./pan        (expect errors: 0)
 *   spin -a -DRELEASE_STORE poll_right_release.pml && cc -o pan pan.c && ./pan   (errors: 1)
 */

bool right = true;      /* poll_right_ in memory: the holder has it */
bool wanted = false;    /* right_wanted_ in memory */
bool p1 = false;        /* idle_state_: the parker counted itself asleep (P1) */
bool hbuf = false;      /* the holder's store buffer holds `right = false` (RELEASE_STORE) */

bool holder_done = false;
bool parker_has_right = false;
bool woke = false;      /* a wake the parker consumes (S3 counted it, S4 released it) */
bool asleep = false;    /* the parker sleeps on the semaphore (P4) */

/* A locked instruction or fence of the holder: its buffered store reaches memory first. */
#define HOLDER_DRAIN  if :: hbuf -> right = false; hbuf = false :: else -> skip fi

active proctype holder() {
  bool w = false;
  bool got = false;
#ifdef RELEASE_STORE
  hbuf = true;                                  /* mov: into the store buffer */
#else
  atomic { HOLDER_DRAIN; right = false };       /* xchg */
#endif
  /* right_wanted_.load(seq_cst): a mov, from memory (nothing of ours buffered for it) */
  w = wanted;
  if
  :: w ->
     atomic { HOLDER_DRAIN; got = wanted; wanted = false };   /* exchange: locked */
     if
     :: got ->
        atomic {                                /* S2 fence (mfence), load idle_state_, S3 */
          HOLDER_DRAIN;
          if
          :: p1 -> woke = true                  /* the parker is asleep: wake it */
          :: else -> wanted = true              /* went to nobody: the wish is stored back */
          fi                                    /* (seq_cst store: xchg; drained above) */
        }
     :: else -> skip
     fi
  :: else -> skip
  fi;
  holder_done = true                            /* goes on to run a long item */
}

/* The holder's buffer drains on its own, at any time. */
active proctype drain() {
end_drain:
  do
  :: atomic { hbuf -> right = false; hbuf = false }
  od
}

active proctype parker() {
  atomic { wanted = true };                     /* D0 store, seq_cst: xchg */
  atomic {                                      /* poll_right_.exchange(true): locked */
    if
    :: !right -> right = true; parker_has_right = true
    :: else -> skip
    fi
  };
  if
  :: parker_has_right -> goto done
  :: else -> skip
  fi;
  atomic { p1 = true };                         /* P1: idle_state_ RMW, locked */
  /* P2: fence (nothing of the parker's is buffered), then load poll_right_ from memory */
  atomic {
    if
    :: !right -> right = true; parker_has_right = true   /* right_freed: P3, takes it */
    :: else -> asleep = true
    fi
  };
  if
  :: parker_has_right -> goto done
  :: else -> skip
  fi;
end_p4:
  woke;                                         /* P4: sleeps until woken */
  asleep = false;
done:
  skip
}

/* When nothing can move: the holder has finished, the buffer drained; the parker must not be
   asleep with the right free and no wake coming. */
active proctype watchdog() {
  atomic {
    timeout ->
    assert(!holder_done || hbuf || parker_has_right || woke || !asleep)
  }
}
