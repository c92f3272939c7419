"""The transition table's rows for a job from its start on (seed 004 Figs. 4 and 5).

Owns the rows of the rsa-states ``RUN`` and ``POST_RUN`` and of ``released`` and
``declined`` (mount input, reset, mount output; stage out, verify, quarantine, tear down;
a new cycle after a demotion or requeue) and the *stay* rows of the start edge
(``Trigger.STARTED``) everywhere but ``released``: :func:`rows`, in table order.
:mod:`rsa_scheduler.core.rows_prerun` has the rows before the start;
:mod:`rsa_scheduler.core.transitions` indexes both.

Must not import anything but the stdlib and other core leaf modules.
"""

from __future__ import annotations

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.rules import (
    CANCEL_TEARDOWN,
    OVER_LIMIT_NOTE,
    REF_FAIL,
    REF_LIMIT,
    REF_NO_OUT,
    REF_NOTHING_HELD,
    REF_OPERATOR,
    REF_QUARANTINE,
    REF_REQUEUE,
    REF_RW_IN,
    REF_UNSERVABLE,
    REF_USER_CANCEL,
    REF_VERIFY,
    STAGING_OUT_NOTE,
    TEARDOWN,
    Branch,
    Cond,
    Effect,
    Rule,
    left,
    stay,
)
from rsa_scheduler.core.states import JOB_STATE_TRIGGERS, RsaState, Trigger

S, T, A, E, C = RsaState, Trigger, ActionKind, Effect, Cond
B = Branch


def rows() -> list[Rule]:
    """The rows of the states from the job's start on, in table order."""
    r: list[Rule] = []
    rw_teardown = "writable input: write the changes back before tear-down"

    # ---- MOUNTING_INPUT: Prolog mounting the RAMDISK over DATA_IN ----------------------
    r += stay(S.MOUNTING_INPUT, T.RUNNING, T.TICK)
    for t, ref in left("§3.3 (input only: nothing to stage out)").items():
        r.append(Rule(S.MOUNTING_INPUT, t, S.TEARING_DOWN, actions=CANCEL_TEARDOWN, ref=ref,
                      note="the job left the compute nodes before its mounts were confirmed",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.CANCEL, A.WRITE_BACK),
                                  note=rw_teardown, ref=REF_RW_IN),)))
    r += [
        Rule(S.MOUNTING_INPUT, T.INPUT_MOUNTED, S.MOUNTED_INPUT, effects=(E.ARM_RESET,),
             ref="§3.2", note="input bind-mounted: arm the input→output reset"),
        Rule(S.MOUNTING_INPUT, T.INPUT_MOUNT_FAILED, S.RESETTING, actions=(A.TELL_USER, A.RESET),
             ref=f"{REF_FAIL}; PFS fallback as §3.2",
             note="input read from the PFS; RAMDISK reset for output",
             branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.TELL_USER, A.WRITE_BACK),
                         note="input mount failed on some nodes; the nodes that did mount "
                              "the writable input may have changed it: written back first",
                         ref=REF_RW_IN),
                       B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                         note="input mount failed and there is no DATA_OUT: the job uses "
                              "the PFS", ref=REF_NO_OUT),)),
    ]

    # ---- MOUNTED_INPUT: job reading its input from the RAMDISK --------------------------
    r += stay(S.MOUNTED_INPUT, T.RUNNING, T.TICK)
    for t, ref in left("§3.2 fn. 3").items():
        r.append(Rule(S.MOUNTED_INPUT, t, S.TEARING_DOWN, actions=TEARDOWN, ref=ref,
                      note="ended before the reset: the RAMDISK holds only input",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                                  note=rw_teardown, ref=REF_RW_IN),)))
    for t, ref in ((T.RESET_DUE, "§3.2 Fig. 4, §3.4"),
                   (T.INPUT_DONE, "§3.2 Fig. 4; ext: user command input-done")):
        r.append(Rule(S.MOUNTED_INPUT, t, S.RESETTING, actions=(A.RESET,), ref=ref,
                      note="reset: release input mounts, recreate empty, mount over DATA_OUT",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                                  note="writable input: write the changes back, then reset",
                                  ref=REF_RW_IN),
                                B(C.NO_OUTPUT, S.MOUNTED_INPUT,
                                  note="no DATA_OUT: nothing to reset for; input stays "
                                       "mounted", ref=REF_NO_OUT))))

    # ---- INPUT_WRITEBACK / WRITEBACK_FAILED: modified input is user data ---------------
    r += stay(S.INPUT_WRITEBACK, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.INPUT_WRITEBACK, T.WRITEBACK_DONE, S.RESETTING, actions=(A.RESET,), ref=REF_RW_IN,
             note="modified input is on disk: go on with the reset (which writes back "
                  "once more after releasing the input mounts)",
             branches=(B(C.STALE_WRITEBACK, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                         note="the job ended while its input was written back: write back "
                              "once more, now that nothing can change it"),
                       B(C.JOB_ENDED, S.TEARING_DOWN, TEARDOWN,
                         note="modified input is on disk and the job has ended: tear down"),
                       B(C.NO_OUTPUT, S.MOUNTED_INPUT,
                         note="modified input is on disk; no DATA_OUT: input stays mounted"))),
        Rule(S.INPUT_WRITEBACK, T.WRITEBACK_FAILED, S.WRITEBACK_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=REF_FAIL,
             note="writing modified input back failed; will retry"),
    ]
    r += stay(S.WRITEBACK_FAILED, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.WRITEBACK_FAILED, T.RETRY_DUE, S.INPUT_WRITEBACK, actions=(A.WRITE_BACK,),
             ref=REF_FAIL, note="back-off over: write the modified input back again"),
        Rule(S.WRITEBACK_FAILED, T.RETRY, S.INPUT_WRITEBACK, actions=(A.WRITE_BACK,),
             effects=(E.RESET_ATTEMPTS,), ref=REF_OPERATOR,
             note="operator: write back again now, with a fresh retry budget"),
        Rule(S.WRITEBACK_FAILED, T.GIVE_UP, S.WRITEBACK_FAILED,
             actions=(A.ALERT, A.TELL_USER), ref=REF_QUARANTINE,
             note="kept for the operator: retry or discard"),
        Rule(S.WRITEBACK_FAILED, T.DISCARD, S.TEARING_DOWN, actions=(A.ALERT, A.DESTROY_FS),
             ref=REF_OPERATOR, note="operator discarded the modified input"),
    ]

    # ---- RESETTING: RESET outstanding (never cancelled: it may already hold output) ----
    r += stay(S.RESETTING, *JOB_STATE_TRIGGERS,
               note="waits for the reset to report: output may already be there")
    r += [
        Rule(S.RESETTING, T.RESET_DONE, S.MOUNTED_OUTPUT, ref="§3.2 Fig. 4",
             note="the fresh RAMDISK is bind-mounted over DATA_OUT"),
        Rule(S.RESETTING, T.RESET_BUSY, S.RESET_FAILED, effects=(E.ARM_RETRY,),
             ref="§3.2 fn. 3", note="input still open: retry later"),
        Rule(S.RESETTING, T.RESET_ERROR, S.TEARING_DOWN, actions=(A.TELL_USER, A.ALERT,
                                                                  A.DESTROY_FS),
             ref=REF_FAIL, note="no RAMDISK for output: the job writes to the PFS",
             branches=(B(C.RW_INPUT, S.WRITEBACK_FAILED, (A.ALERT,), (E.ARM_RETRY,),
                         note="the reset failed with writable input on the RAMDISK: kept, "
                              "written back again before anything destroys it",
                         ref=REF_RW_IN),)),
    ]

    # ---- RESET_FAILED: input mounts busy, waiting to retry ----------------------------
    r += stay(S.RESET_FAILED, T.RUNNING, T.TICK)
    for t, ref in left("§3.2 fn. 3").items():
        r.append(Rule(S.RESET_FAILED, t, S.TEARING_DOWN, actions=TEARDOWN, ref=ref,
                      note="the job ended with its input still mounted: no output here",
                      branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                                  note=rw_teardown, ref=REF_RW_IN),)))
    r += [
        Rule(S.RESET_FAILED, T.RETRY_DUE, S.RESETTING, actions=(A.RESET,),
             ref="§3.2 fn. 3; ext: retry back-off",
             note="back-off over: try the reset again (the input may be closed now)",
             branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                         note="writable input, still mounted since the last write-back: "
                              "write the changes back again, then reset (or tear down if "
                              "the job has ended)", ref=REF_RW_IN),
                       B(C.JOB_ENDED, S.TEARING_DOWN, TEARDOWN,
                         note="the job ended with its input still mounted: no output here"))),
        Rule(S.RESET_FAILED, T.RETRY, S.RESETTING, actions=(A.RESET,),
             effects=(E.RESET_ATTEMPTS,), ref=REF_OPERATOR,
             note="operator: try the reset again now, with a fresh retry budget",
             branches=(B(C.RW_INPUT, S.INPUT_WRITEBACK, (A.WRITE_BACK,),
                         (E.RESET_ATTEMPTS,),
                         note="operator: write the writable input back again, then reset",
                         ref=REF_RW_IN),)),
        Rule(S.RESET_FAILED, T.GIVE_UP, S.MOUNTED_INPUT, actions=(A.TELL_USER,),
             effects=(E.DISARM_RESET,), ref="§3.2 fn. 3",
             note="input never released: output goes straight to the PFS"),
    ]

    # ---- MOUNTING_OUTPUT: Prolog mounting the empty RAMDISK over DATA_OUT --------------
    r += stay(S.MOUNTING_OUTPUT, T.RUNNING, T.TICK)
    for t, ref in left("§3.3 Fig. 5; ext: mounts unconfirmed").items():
        r.append(Rule(S.MOUNTING_OUTPUT, t, S.STAGING_OUT, actions=(A.CANCEL, A.STAGE_OUT),
                      ref=ref,
                      note="unconfirmed mounts may have taken output: stage out to be safe"))
    r += [
        Rule(S.MOUNTING_OUTPUT, T.OUTPUT_MOUNTED, S.MOUNTED_OUTPUT, ref="§3.2 Fig. 4",
             note="the RAMDISK is bind-mounted over DATA_OUT: the job writes results there"),
        Rule(S.MOUNTING_OUTPUT, T.OUTPUT_MOUNT_FAILED, S.MOUNTED_OUTPUT,
             actions=(A.TELL_USER,), ref=REF_FAIL,
             note="nodes without the mount write to the PFS; nodes that did mount it may "
                  "write to the RAMDISK: stage out only after the job has ended"),
    ]

    # ---- MOUNTED_OUTPUT: job writing results to the RAMDISK ----------------------------
    r += stay(S.MOUNTED_OUTPUT, T.RUNNING, T.TICK, note="§3.2: no changes until finished")
    for t, ref in left("§3.3 Fig. 5").items():
        # the job's end: its comment says the output is not complete yet (a requeued
        # job's says why it is held meanwhile: daemon/holds.py)
        r.append(Rule(S.MOUNTED_OUTPUT, t, S.STAGING_OUT, ref=ref,
                      actions=(A.TELL_USER, A.STAGE_OUT) if t is T.FINISHED
                      else (A.STAGE_OUT,),
                      note=STAGING_OUT_NOTE if t is T.FINISHED
                      else "job requeued: stage the output of its run out"))

    # ---- STAGING_OUT / VERIFYING / STAGE_OUT_FAILED / QUARANTINED: output at risk -----
    r += stay(S.STAGING_OUT, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.STAGING_OUT, T.STAGE_OUT_DONE, S.VERIFYING, actions=(A.VERIFY,),
             ref=f"§3.3; {REF_VERIFY}",
             note="output copied out: check it before the RAMDISK is destroyed"),
        Rule(S.STAGING_OUT, T.STAGE_OUT_FAILED, S.STAGE_OUT_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=REF_FAIL, note="stage-out failed; will retry, data kept"),
    ]
    r += stay(S.VERIFYING, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.VERIFYING, T.VERIFIED, S.OUTPUT_VERIFIED, actions=(A.TELL_USER,), ref="§3.3",
             note="stage-out finished"),  # the verify step's summary says what is where
        Rule(S.VERIFYING, T.VERIFY_FAILED, S.STAGE_OUT_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=REF_VERIFY,
             note="copy differs from the RAMDISK: stage out again, what differed "
                  "copied again whatever its size and mtime"),
    ]
    r += stay(S.STAGE_OUT_FAILED, *JOB_STATE_TRIGGERS, note="holds user data")
    r += [
        Rule(S.STAGE_OUT_FAILED, T.RETRY_DUE, S.STAGING_OUT, actions=(A.STAGE_OUT,), ref=REF_FAIL,
             note="back-off over: stage out again"),
        Rule(S.STAGE_OUT_FAILED, T.RETRY, S.STAGING_OUT, actions=(A.STAGE_OUT,),
             effects=(E.RESET_ATTEMPTS, E.END_RESCUE), ref=REF_OPERATOR,
             note="operator: stage out again now (to DATA_OUT, also during a rescue), "
                  "with a fresh retry budget"),
        Rule(S.STAGE_OUT_FAILED, T.GIVE_UP, S.QUARANTINED, actions=(A.ALERT, A.TELL_USER),
             effects=(E.ARM_RESCUE,), ref=REF_QUARANTINE,
             note="kept on the RSA nodes for the operator"),
        Rule(S.STAGE_OUT_FAILED, T.DISCARD, S.TEARING_DOWN, actions=(A.ALERT, A.DESTROY_FS),
             ref=REF_OPERATOR, note="operator discarded the output"),
    ]
    r += stay(S.QUARANTINED, *JOB_STATE_TRIGGERS, note="data kept until an operator acts")
    r += [
        Rule(S.QUARANTINED, T.RETRY, S.STAGING_OUT, actions=(A.STAGE_OUT,),
             effects=(E.RESET_ATTEMPTS, E.END_RESCUE), ref=REF_OPERATOR,
             note="operator: stage out again, with a fresh retry budget"),
        Rule(S.QUARANTINED, T.RESCUE_DUE, S.STAGING_OUT,
             actions=(A.ALERT, A.TELL_USER, A.STAGE_OUT),
             effects=(E.RESET_ATTEMPTS, E.START_RESCUE), ref=REF_QUARANTINE,
             note="rescue: quarantined longer than quarantine.rescue_after"),
        Rule(S.QUARANTINED, T.DISCARD, S.TEARING_DOWN, actions=(A.ALERT, A.DESTROY_FS),
             ref=REF_OPERATOR, note="operator discarded the output"),
    ]

    # ---- OUTPUT_VERIFIED -> TEARING_DOWN -> RELEASED ------------------------------------
    r += stay(S.OUTPUT_VERIFIED, T.QUEUED, T.ON_DECK, T.DEMOTED, T.RUNNING, T.FINISHED)
    r.append(Rule(S.OUTPUT_VERIFIED, T.TICK, S.TEARING_DOWN, actions=TEARDOWN, ref="§3.3",
                  note="output safe on persistent storage: destroy the RAMDISK"))
    r += stay(S.TEARING_DOWN, *JOB_STATE_TRIGGERS)
    r += [
        Rule(S.TEARING_DOWN, T.DESTROYED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref="§3.3",
             note="RAMDISK destroyed: the nodes go back to the free list"),
        Rule(S.TEARING_DOWN, T.DESTROY_FAILED, S.TEARDOWN_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=REF_FAIL,
             note="RAMDISK teardown failed; nodes held, will retry"),
    ]
    r += stay(S.TEARDOWN_FAILED, *JOB_STATE_TRIGGERS,
               note="nodes stay held: never hand a dirty node to another job")
    r += [
        Rule(S.TEARDOWN_FAILED, T.RETRY_DUE, S.TEARING_DOWN, actions=TEARDOWN, ref=REF_FAIL,
             note="back-off over: try the teardown again"),
        Rule(S.TEARDOWN_FAILED, T.RETRY, S.TEARING_DOWN, actions=TEARDOWN,
             effects=(E.RESET_ATTEMPTS,), ref=REF_OPERATOR,
             note="operator: try the teardown again now, with a fresh retry budget"),
        Rule(S.TEARDOWN_FAILED, T.GIVE_UP, S.TEARDOWN_FAILED, actions=(A.ALERT,), ref=REF_FAIL,
             note="an operator must clean the nodes and force-release"),
        Rule(S.TEARDOWN_FAILED, T.FORCE_RELEASE, S.RELEASED, actions=(A.ALERT, A.RELEASE),
             effects=(E.RELEASE_NODES,), ref=REF_OPERATOR,
             note="operator vouches the nodes are clean"),
    ]

    # ---- RELEASED / DECLINED --------------------------------------------------------------
    r += stay(S.RELEASED, T.QUEUED, T.DEMOTED, T.RUNNING, T.FINISHED, T.TICK)
    r += [
        Rule(S.RELEASED, T.STARTED, S.DECLINED, actions=(A.TELL_USER,), ref="§3.2",
             note="started before its RSA nodes were allocated again (after a demotion or "
                  "a requeue): the job reads and writes the PFS"),
        Rule(S.RELEASED, T.ON_DECK, S.RELEASED, effects=(E.TRY_ALLOCATE,),
             ref="§3.1 (jobs move between job-states); ext: on-deck settle time",
             note="on-deck again (after a demotion or requeue): new cycle"),
        Rule(S.RELEASED, T.NODES_ALLOCATED, S.ALLOCATED, actions=(A.ALLOCATE,), ref="§3.1",
             note="nodes allocated again: a new cycle"),
        Rule(S.RELEASED, T.NODES_BUSY, S.RELEASED),
        Rule(S.RELEASED, T.OVER_LIMIT, S.RELEASED, actions=(A.TELL_USER,), ref=REF_LIMIT,
             note=OVER_LIMIT_NOTE),
        Rule(S.RELEASED, T.POLICY_VIOLATION, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=REF_UNSERVABLE,
             note="the RSA cannot serve this job; it uses the PFS"),
        Rule(S.RELEASED, T.GIVE_UP, S.DECLINED, effects=(E.MARK_DECLINED,), ref=REF_FAIL,
             note="declined earlier (the user was told why then): no new message"),
        Rule(S.RELEASED, T.CANCEL_STAGING, S.DECLINED, effects=(E.MARK_DECLINED,),
             ref=REF_USER_CANCEL,
             note="staging cancelled by the user: never allocate for this job again"),
    ]
    r += stay(S.DECLINED, T.QUEUED, T.DEMOTED, T.RUNNING, T.TICK, T.CANCEL_STAGING,
               T.NODES_BUSY, T.GIVE_UP, T.POLICY_VIOLATION)
    r += [
        Rule(S.DECLINED, T.FINISHED, S.RELEASED, note="nothing was held", ref=REF_NOTHING_HELD),
        Rule(S.DECLINED, T.OVER_LIMIT, S.DECLINED, actions=(A.TELL_USER,), ref=REF_LIMIT,
             note=OVER_LIMIT_NOTE),
        Rule(S.DECLINED, T.ON_DECK, S.DECLINED, effects=(E.TRY_ALLOCATE,), ref=REF_REQUEUE,
             note="on-deck again after a requeue: a job declined only because it started "
                  "before it had RSA nodes gets a new cycle (TRY_ALLOCATE gives up at "
                  "once for a job the RSA declined for good)"),
        Rule(S.DECLINED, T.NODES_ALLOCATED, S.ALLOCATED, actions=(A.ALLOCATE,),
             ref=f"§3.1; {REF_REQUEUE}", note="nodes allocated after a requeue: a new cycle"),
    ]
    # A job that starts while its RAMDISK is torn down (a demotion, a change after its
    # lock-in, a lost RSA node, an earlier run's): it reads the PFS, and no later row
    # says so (the RAMDISK's end reaches RELEASED after the start edge). Declined jobs
    # were told why already.
    started_late = ("started while its RAMDISK was torn down: the job reads and writes "
                    "the PFS")
    for src in (S.TEARING_DOWN, S.TEARDOWN_FAILED):
        r.append(Rule(src, T.STARTED, src, actions=(A.TELL_USER,), ref="§3.2",
                      note=started_late,
                      branches=(B(C.DECLINED, src, note="declined: its user was told why "
                                                       "then; no new message",
                                  ref="§3.2"),)))
    # The start edge matters only to a job without a RAMDISK; everywhere else the running
    # level (fed on every settle) does the work.
    for state in RsaState:
        if state not in (S.RELEASED, S.TEARING_DOWN, S.TEARDOWN_FAILED):
            r += stay(state, T.STARTED)
    return r
