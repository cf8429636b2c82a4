/*
 * poll_right_release.pml: why Scheduler::release_poll_right()'s handover needs S2's fence.
 *
 * The release of the poll right against a worker going to sleep because it found the right
 * taken (sched/src/scheduler.cpp), alone, under x86-TSO (each thread's plain stores wait in a
 * FIFO store buffer; its own loads read that buffer first; a locked instruction (xchg, lock
 * cmpxchg, mfence) drains it). This is what the compilers emit for the C++ orderings used: a
 * release store is a plain mov, every load a plain mov, every read-modify-write a locked
 * instruction, a seq_cst fence an mfence.
 *
 *   holder (release_poll_right(), after a busy worker's look; it then runs items for long):
 *     poll_right_.store(false, release)    a mov, into the store buffer
 *     notify_parked(): S2 fence            mfence: the store reaches memory (-DNO_FENCE: none)
 *                      load idle_state_; S3 wakes the parker if it is asleep (P1 done)
 *   parker (park(), with the right taken):
 *         poll_right_.exchange(true)       try_take_poll_right(): taken, so it goes on
 *     P1  idle_state_ RMW                  counted asleep (locked)
 *     P2  fence; right_freed = !poll_right_.load()   free: it comes back (P3) and takes it
 *     P4  sleeps on the semaphore until woken.
 *
 * PROPERTY (checked when nothing can move): the parker holds the right or was woken. The
 * failure it excludes is a parker asleep on the semaphore with the right free and nobody in
 * the kernel while the holder runs a long item (the IO stall of
 * WorkerPolling.AnIdleWorkerReapsWhileTheOtherRunsALongItem, in a race window).
 *
 * With the fence it holds (0 errors); with -DNO_FENCE spin finds the violation: the holder's
 * store waits in its buffer while its load reads idle_state_ without P1, and the parker's P2
 * load still sees the right taken. The store itself may be a release store: the fence orders
 * it. This checks TSO, the model of the machines the project runs on; for the C++ model the
 * argument is the fences' single total order, in the comment of release_poll_right().
 *
 * RUN: sched/model/check.sh (by `make model`), or by hand:
 *   spin -a poll_right_release.pml && cc -o pan pan.c && ./pan        (expect errors: 0)
 *   spin -a -DNO_FENCE poll_right_release.pml && cc -o pan pan.c && ./pan   (errors: 1)
 */

bool right = true;      /* poll_right_ in memory: the holder has it */
bool p1 = false;        /* idle_state_: the parker counted itself asleep (P1) */
bool hbuf = false;      /* the holder's store buffer holds `right = false` */

bool holder_done = false;
bool parker_has_right = false;
bool woke = false;      /* a wake the parker consumes (S3 counted it, S4 released it) */
bool asleep = false;    /* the parker sleeps on the semaphore (P4) */

/* A locked instruction or fence of the holder: its buffered store reaches memory first. */
#define HOLDER_DRAIN  if :: hbuf -> right = false; hbuf = false :: else -> skip fi

active proctype holder() {
  hbuf = true;                                  /* release store: a mov, into the buffer */
#ifndef NO_FENCE
  atomic { HOLDER_DRAIN };                      /* S2: mfence */
#endif
  atomic {                                      /* load idle_state_, S3 */
    if
    :: p1 -> woke = true                        /* the parker is asleep: wake it */
    :: else -> skip
    fi
  };
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
