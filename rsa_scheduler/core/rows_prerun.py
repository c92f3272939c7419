"""The transition table's rows for a job before it runs (seed 004 Figs. 2 and 3).

Owns the rows of the rsa-states ``none`` and ``PRE_RUN`` (allocate, build the RAMDISK,
stage in, lock in; demoted, cancelled or started early; an RSA node lost while the input
is staged): :func:`rows`, in the order the table and its generated diagrams list them.
:mod:`rsa_scheduler.core.rows_run` has the rest; :mod:`rsa_scheduler.core.transitions`
indexes both.

Must not import anything but the stdlib and other core leaf modules.
"""

from __future__ import annotations

from rsa_scheduler.core.actions import ActionKind
from rsa_scheduler.core.rules import (
    CANCEL_TEARDOWN,
    EARLY_NO_OUT,
    OVER_LIMIT_NOTE,
    REF_CANCELLED,
    REF_EARLY,
    REF_EARLY_NO_OUT,
    REF_EARLY_OUT,
    REF_FAIL,
    REF_LIMIT,
    REF_LOCKIN_END,
    REF_LOST,
    REF_NO_IN,
    REF_NO_OUT,
    REF_NOTHING_HELD,
    REF_OPERATOR,
    REF_UNSERVABLE,
    REF_USER_CANCEL,
    REF_WAIT,
    TEARDOWN,
    WAIT_NO_OUT,
    Branch,
    Cond,
    Effect,
    Rule,
    stay,
)
from rsa_scheduler.core.states import JOB_STATE_TRIGGERS, RsaState, Trigger

S, T, A, E, C = RsaState, Trigger, ActionKind, Effect, Cond
B = Branch


def rows() -> list[Rule]:
    """The rows of ``none`` and the states before the job runs, in table order."""
    r: list[Rule] = []
    fallback_actions = (A.CANCEL, A.TELL_USER, A.RESET)
    fallback_note = "early start: input read from the PFS; RAMDISK recreated for output"
    wait_note = "wait: the Prolog holds the start until staged"
    no_in_out = "no DATA_IN: mount the RAMDISK over DATA_OUT"

    # ---- NONE: no RSA resources ------------------------------------------------------
    r += stay(S.NONE, T.QUEUED, T.DEMOTED, T.TICK)
    r += [
        Rule(S.NONE, T.ON_DECK, S.NONE, effects=(E.TRY_ALLOCATE,),
             ref="§3.1; ext: on-deck settle time",
             note="on-deck: allocate RSA nodes in proportion to the job"),
        Rule(S.NONE, T.RUNNING, S.DECLINED, actions=(A.TELL_USER,), ref="§3.2",
             note="started before it had RSA nodes: the job reads the PFS"),
        Rule(S.NONE, T.FINISHED, S.RELEASED, note="ended without ever being on-deck",
             ref=REF_NOTHING_HELD),
        Rule(S.NONE, T.NODES_ALLOCATED, S.ALLOCATED, actions=(A.ALLOCATE,), ref="§3.1",
             note="nodes removed from the free list and marked as the job's"),
        Rule(S.NONE, T.NODES_BUSY, S.NONE, ref="§3.1",
             note="not enough free RSA nodes: skip this cycle"),
        Rule(S.NONE, T.OVER_LIMIT, S.NONE, actions=(A.TELL_USER,), ref=REF_LIMIT,
             note=OVER_LIMIT_NOTE),
        Rule(S.NONE, T.POLICY_VIOLATION, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=REF_UNSERVABLE,
             note="the RSA cannot serve this job; it uses the PFS"),
        Rule(S.NONE, T.GIVE_UP, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=REF_FAIL,
             note="the RSA gave up on this job; it uses the PFS"),
        Rule(S.NONE, T.CANCEL_STAGING, S.DECLINED, actions=(A.TELL_USER,),
             effects=(E.MARK_DECLINED,), ref=REF_USER_CANCEL,
             note="staging cancelled by the user; job uses the PFS"),
    ]

    # ---- ALLOCATED: nodes held, nothing started --------------------------------------
    r += stay(S.ALLOCATED, T.ON_DECK)
    r += [
        Rule(S.ALLOCATED, T.QUEUED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref="§3.1 Fig. 3",
             note="demoted: release the nodes (nothing built yet)"),
        Rule(S.ALLOCATED, T.DEMOTED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref="§3.1 Fig. 3",
             note="demoted: release the nodes (nothing built yet)"),
        Rule(S.ALLOCATED, T.RUNNING, S.FS_BUILDING, actions=(A.BUILD_FS,),
             ref=REF_EARLY_OUT,
             note="early start: build the RAMDISK for output",
             branches=(
                 B(C.POLICY_WAIT, S.ALLOCATED, effects=(E.ARM_WAIT,),
                   note=wait_note, ref=REF_EARLY),
                 B(C.NO_OUTPUT, S.RELEASED, (A.TELL_USER, A.RELEASE), (E.RELEASE_NODES,),
                   note=EARLY_NO_OUT, ref=REF_EARLY_NO_OUT),
             )),
        Rule(S.ALLOCATED, T.FINISHED, S.RELEASED, actions=(A.RELEASE,),
             effects=(E.RELEASE_NODES,), ref=REF_CANCELLED,
             note="cancelled before it ran: release the nodes"),
        Rule(S.ALLOCATED, T.TICK, S.FS_BUILDING, actions=(A.BUILD_FS,), ref="§3.1",
             note="a separate process constructs the parallel RAMDISK"),
        Rule(S.ALLOCATED, T.CANCEL_STAGING, S.DECLINED, actions=(A.TELL_USER, A.RELEASE),
             effects=(E.RELEASE_NODES, E.MARK_DECLINED), ref=REF_USER_CANCEL,
             note="staging cancelled by the user; job uses the PFS"),
        Rule(S.ALLOCATED, T.WAIT_EXPIRED, S.FS_BUILDING, actions=(A.BUILD_FS,),
             effects=(E.END_WAIT,), ref=REF_WAIT,
             note="waited too long for stage-in: the job reads the PFS",
             branches=(B(C.NO_OUTPUT, S.RELEASED, (A.TELL_USER, A.RELEASE),
                         (E.RELEASE_NODES,), ref=REF_NO_OUT),)),
    ]

    # ---- FS_BUILDING: BUILD_FS outstanding --------------------------------------------
    r += stay(S.FS_BUILDING, T.ON_DECK, T.TICK)
    r += [
        Rule(S.FS_BUILDING, T.QUEUED, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             ref="§3.1 Fig. 3", note="demoted: stop the build, destroy, release the nodes"),
        Rule(S.FS_BUILDING, T.DEMOTED, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             ref="§3.1 Fig. 3", note="demoted: stop the build, destroy, release the nodes"),
        Rule(S.FS_BUILDING, T.RUNNING, S.FS_BUILDING, ref=REF_EARLY_OUT,
             note="early start: let the build finish, then use it for output",
             effects=(),
             branches=(
                 B(C.POLICY_WAIT, S.FS_BUILDING, effects=(E.ARM_WAIT,),
                   note=wait_note, ref=REF_EARLY),
                 B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                   note=EARLY_NO_OUT, ref=REF_EARLY_NO_OUT),
             )),
        Rule(S.FS_BUILDING, T.FINISHED, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             ref=REF_CANCELLED, note="cancelled before it ran: stop the build and tear down"),
        Rule(S.FS_BUILDING, T.FS_BUILT, S.FS_READY, ref="§3.1",
             note="the RAMDISK is marked ready for use"),
        Rule(S.FS_BUILDING, T.FS_BUILD_FAILED, S.FS_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=REF_FAIL, note="RAMDISK build failed"),
        Rule(S.FS_BUILDING, T.CANCEL_STAGING, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             effects=(E.MARK_DECLINED,), ref=REF_USER_CANCEL,
             note="staging cancelled by the user: stop the build and tear down"),
        Rule(S.FS_BUILDING, T.WAIT_EXPIRED, S.FS_BUILDING, effects=(E.END_WAIT,), ref=REF_WAIT,
             note="waited too long for stage-in: the job reads the PFS",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                         ref=REF_NO_OUT),)),
    ]

    # ---- FS_FAILED: the build failed; clean up whatever half exists -------------------
    for t in JOB_STATE_TRIGGERS:
        r.append(Rule(S.FS_FAILED, t, S.TEARING_DOWN, actions=TEARDOWN, ref=REF_FAIL,
                      note="remove the half-built RAMDISK; a later cycle may try again"))
    r.append(Rule(S.FS_FAILED, T.GIVE_UP, S.TEARING_DOWN, actions=(A.TELL_USER, A.DESTROY_FS),
                  effects=(E.MARK_DECLINED,), ref=REF_FAIL,
                  note="the RAMDISK could not be built; the job uses the PFS"))

    # ---- FS_READY: empty RAMDISK, nothing outstanding --------------------------------
    r += stay(S.FS_READY, T.ON_DECK)
    r += [
        Rule(S.FS_READY, T.QUEUED, S.TEARING_DOWN, actions=TEARDOWN, ref="§3.1 Fig. 3",
             note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.FS_READY, T.DEMOTED, S.TEARING_DOWN, actions=TEARDOWN, ref="§3.1 Fig. 3",
             note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.FS_READY, T.RUNNING, S.MOUNTING_OUTPUT, actions=(A.TELL_USER, A.MOUNT_OUTPUT),
             ref=REF_EARLY_OUT,
             note="early start: nothing staged yet; the empty RAMDISK takes the output",
             branches=(
                 B(C.NO_INPUT, S.MOUNTING_OUTPUT, (A.MOUNT_OUTPUT,),
                   note="no input to stage: the RAMDISK takes the output",
                   ref=f"§3.2; {REF_NO_IN}"),
                 B(C.POLICY_WAIT, S.STAGING_IN, (A.STAGE_IN,), (E.ARM_WAIT,),
                   note="wait: stage in while the Prolog holds the start", ref=REF_EARLY),
                 B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                   note=EARLY_NO_OUT, ref=REF_EARLY_NO_OUT),
             )),
        Rule(S.FS_READY, T.FINISHED, S.TEARING_DOWN, actions=TEARDOWN, ref=REF_CANCELLED,
             note="cancelled before it ran: destroy the RAMDISK"),
        Rule(S.FS_READY, T.TICK, S.STAGING_IN, actions=(A.STAGE_IN,), ref="§3.1",
             note="the RAMDISK is ready: start the data stage-in",
             branches=(B(C.NO_INPUT, S.STAGED_IN, (A.LOCK_IN,), (E.ARM_LOCKIN,),
                         note="nothing to stage in: lock the job in at once",
                         ref=f"§3.1; {REF_NO_IN}"),)),
        Rule(S.FS_READY, T.CANCEL_STAGING, S.TEARING_DOWN, actions=TEARDOWN,
             effects=(E.MARK_DECLINED,), ref=REF_USER_CANCEL,
             note="staging cancelled by the user: destroy the RAMDISK"),
        Rule(S.FS_READY, T.WAIT_EXPIRED, S.MOUNTING_OUTPUT,
             actions=(A.TELL_USER, A.MOUNT_OUTPUT), effects=(E.END_WAIT,), ref=REF_WAIT,
             note="waited too long for stage-in: input from the PFS, RAMDISK for output",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                         note=WAIT_NO_OUT, ref=REF_NO_OUT),)),
    ]

    # ---- STAGING_IN: STAGE_IN outstanding ---------------------------------------------
    r += stay(S.STAGING_IN, T.ON_DECK, T.TICK)
    r += [
        Rule(S.STAGING_IN, T.QUEUED, S.TEARING_DOWN, actions=CANCEL_TEARDOWN, ref="§3.1 Fig. 3",
             note="demoted: stop staging, destroy the RAMDISK, release the nodes"),
        Rule(S.STAGING_IN, T.DEMOTED, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             ref="§3.1 Fig. 3",
             note="demoted: stop staging, destroy the RAMDISK, release the nodes"),
        Rule(S.STAGING_IN, T.RUNNING, S.RESETTING, fallback_actions, ref=REF_EARLY_OUT,
             note=fallback_note,
             branches=(
                 B(C.POLICY_WAIT, S.STAGING_IN, effects=(E.ARM_WAIT,),
                   note=wait_note, ref=REF_EARLY),
                 B(C.POLICY_UNION, S.MOUNTING_INPUT, (A.CANCEL, A.TELL_USER, A.MOUNT_INPUT),
                   note="union: overlay what is staged over the PFS directory", ref=REF_EARLY),
                 B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                   note=EARLY_NO_OUT, ref=REF_EARLY_NO_OUT),
             )),
        Rule(S.STAGING_IN, T.FINISHED, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             ref=REF_CANCELLED, note="cancelled before it ran: stop staging and tear down"),
        Rule(S.STAGING_IN, T.STAGE_IN_DONE, S.STAGED_IN, actions=(A.LOCK_IN,),
             effects=(E.ARM_LOCKIN,), ref="§3.1",
             note="staged: lock the job in"),
        Rule(S.STAGING_IN, T.STAGE_IN_FAILED, S.STAGE_IN_FAILED, actions=(A.ALERT,),
             effects=(E.ARM_RETRY,), ref=REF_FAIL, note="stage-in failed; will retry"),
        Rule(S.STAGING_IN, T.STAGE_IN_REFUSED, S.TEARING_DOWN,
             actions=(A.TELL_USER, A.DESTROY_FS), effects=(E.MARK_DECLINED,),
             ref="§3.4 (scripts run as the user); ext: refusal",
             note="refused, no retry: job uses the PFS"),
        Rule(S.STAGING_IN, T.CANCEL_STAGING, S.TEARING_DOWN, actions=CANCEL_TEARDOWN,
             effects=(E.MARK_DECLINED,), ref=REF_USER_CANCEL,
             note="staging cancelled by the user: stop staging and tear down"),
        Rule(S.STAGING_IN, T.WAIT_EXPIRED, S.RESETTING, fallback_actions,
             effects=(E.END_WAIT,), ref=REF_WAIT, note=fallback_note,
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.CANCEL, A.TELL_USER, A.DESTROY_FS),
                         note=WAIT_NO_OUT, ref=REF_NO_OUT),)),
    ]

    # ---- an RSA node lost before the input is staged (Scheduler.set_node_state) -------
    # The RAMDISK holds at most a partial copy of DATA_IN: it is torn down (the lost node
    # is skipped and cleaned when it comes back, daemon/service.py). Under wait the job is
    # staged again on healthy nodes when it is next; otherwise it reads the PFS.
    lost_note = "an RSA node was lost while the input was staged"
    r.append(Rule(S.ALLOCATED, T.NODE_LOST, S.RELEASED, actions=(A.RELEASE,), ref=REF_LOST,
                  note=f"{lost_note}: other nodes are allocated when the job is next"))
    for src, acts in ((S.FS_BUILDING, CANCEL_TEARDOWN), (S.FS_READY, TEARDOWN),
                      (S.STAGING_IN, CANCEL_TEARDOWN), (S.STAGE_IN_FAILED, TEARDOWN),
                      (S.FS_FAILED, TEARDOWN)):
        r.append(Rule(src, T.NODE_LOST, S.TEARING_DOWN, actions=(A.TELL_USER, *acts),
                      effects=(E.MARK_DECLINED,), ref=REF_LOST,
                      note=f"{lost_note}: the job reads the PFS",
                      branches=(B(C.POLICY_WAIT, S.TEARING_DOWN, (A.TELL_USER, *acts),
                                  note=f"{lost_note}: it is staged again on other RSA "
                                       "nodes"),)))

    # ---- STAGE_IN_FAILED: waiting to retry -------------------------------------------
    r += stay(S.STAGE_IN_FAILED, T.ON_DECK, T.TICK)
    r += [
        Rule(S.STAGE_IN_FAILED, T.QUEUED, S.TEARING_DOWN, actions=TEARDOWN,
             ref="§3.1 Fig. 3", note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.STAGE_IN_FAILED, T.DEMOTED, S.TEARING_DOWN, actions=TEARDOWN,
             ref="§3.1 Fig. 3", note="demoted: destroy the RAMDISK, release the nodes"),
        Rule(S.STAGE_IN_FAILED, T.RUNNING, S.RESETTING, actions=(A.TELL_USER, A.RESET),
             ref=f"§3.1 fn. 2; {REF_FAIL}",
             note="started while stage-in was failing: input from the PFS",
             branches=(B(C.NO_OUTPUT, S.TEARING_DOWN, (A.TELL_USER, A.DESTROY_FS),
                         ref=REF_NO_OUT),)),
        Rule(S.STAGE_IN_FAILED, T.FINISHED, S.TEARING_DOWN, actions=TEARDOWN, ref=REF_CANCELLED,
             note="cancelled before it ran: destroy the RAMDISK"),
        Rule(S.STAGE_IN_FAILED, T.RETRY_DUE, S.STAGING_IN, actions=(A.STAGE_IN,), ref=REF_FAIL,
             note="back-off over: stage in again"),
        Rule(S.STAGE_IN_FAILED, T.RETRY, S.STAGING_IN, actions=(A.STAGE_IN,),
             effects=(E.RESET_ATTEMPTS,), ref=REF_OPERATOR,
             note="operator: stage in again now, with a fresh retry budget"),
        Rule(S.STAGE_IN_FAILED, T.GIVE_UP, S.TEARING_DOWN, actions=(A.TELL_USER, A.DESTROY_FS),
             effects=(E.MARK_DECLINED,), ref=REF_FAIL,
             note="stage-in kept failing; the job uses the PFS"),
        Rule(S.STAGE_IN_FAILED, T.CANCEL_STAGING, S.TEARING_DOWN, actions=TEARDOWN,
             effects=(E.MARK_DECLINED,), ref=REF_USER_CANCEL,
             note="staging cancelled by the user: destroy the RAMDISK"),
    ]

    # ---- STAGED_IN: LOCK_IN outstanding; LOCKED_IN / LOCK_FAILED: waiting to start ------
    # A lock-in always ends: every row leaving these states restores the job's own QOS or
    # priority (UNLOCK, tracked beside the job's other action and retried until it is
    # done: core.machine), the start included, so the job runs, is billed, limited,
    # preempted and accounted under its own QOS, and a requeued run comes back as any
    # other job (tests/unit/test_lockin_rules.py checks every such row).
    expired = ("locked in but not started within the lock-in bound (slurm.lockin.timeout): "
               "unlocked, the RAMDISK torn down; the job reads its input from the PFS")
    changed = ("the job was changed in Slurm after its lock-in: unlocked, the RAMDISK torn "
               "down; it is staged again when it is next to start")
    r += stay(S.STAGED_IN, T.ON_DECK, T.TICK)
    r += [
        Rule(S.STAGED_IN, T.QUEUED, S.TEARING_DOWN, actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS),
             ref="§3.1 Fig. 3", note="demoted: undo the lock-in, destroy, release the nodes"),
        Rule(S.STAGED_IN, T.DEMOTED, S.TEARING_DOWN,
             actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS), ref="§3.1 Fig. 3",
             note="demoted: undo the lock-in, destroy, release the nodes"),
        Rule(S.STAGED_IN, T.RUNNING, S.MOUNTING_INPUT,
             actions=(A.CANCEL, A.UNLOCK, A.MOUNT_INPUT), ref=f"§3.2; {REF_LOCKIN_END}",
             note="started during lock-in: its own QOS/priority back; Prolog bind-mounts "
                  "the RAMDISK over DATA_IN",
             branches=(B(C.NO_INPUT, S.MOUNTING_OUTPUT, (A.CANCEL, A.UNLOCK, A.MOUNT_OUTPUT),
                         note=no_in_out, ref=f"§3.2; {REF_NO_IN}"),)),
        Rule(S.STAGED_IN, T.FINISHED, S.TEARING_DOWN, actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS),
             ref=REF_CANCELLED, note="cancelled before it ran: destroy the RAMDISK"),
        Rule(S.STAGED_IN, T.LOCKED, S.LOCKED_IN, effects=(E.LOCKED,), ref="§3.1",
             note="lock-in priority (or QOS) set: a demotion is now unlikely"),
        Rule(S.STAGED_IN, T.LOCK_FAILED, S.LOCK_FAILED, actions=(A.ALERT,),
             ref=f"§3.1 (lock-in); {REF_FAIL}",
             note="lock-in failed: the job may be demoted and lose its RAMDISK"),
        Rule(S.STAGED_IN, T.CANCEL_STAGING, S.TEARING_DOWN,
             actions=(A.CANCEL, A.UNLOCK, A.DESTROY_FS), effects=(E.MARK_DECLINED,),
             ref=REF_USER_CANCEL,
             note="staging cancelled by the user: undo the lock-in, destroy the RAMDISK"),
        Rule(S.STAGED_IN, T.LOCKIN_EXPIRED, S.TEARING_DOWN,
             actions=(A.CANCEL, A.TELL_USER, A.UNLOCK, A.DESTROY_FS),
             effects=(E.MARK_DECLINED,), ref=REF_LOCKIN_END, note=expired),
        Rule(S.STAGED_IN, T.JOB_CHANGED, S.TEARING_DOWN,
             actions=(A.CANCEL, A.TELL_USER, A.UNLOCK, A.DESTROY_FS), ref=REF_LOCKIN_END,
             note=changed),
    ]
    for src in (S.LOCKED_IN, S.LOCK_FAILED):
        # LOCK_FAILED: the lock-in may have half happened (a timeout after Slurm took it)
        r += stay(src, T.ON_DECK, T.TICK)
        r += [
            Rule(src, T.QUEUED, S.TEARING_DOWN, actions=(A.UNLOCK, A.DESTROY_FS),
                 ref="§3.1 Fig. 3", note="demoted despite lock-in: tear down"),
            Rule(src, T.DEMOTED, S.TEARING_DOWN, actions=(A.UNLOCK, A.DESTROY_FS),
                 ref="§3.1 Fig. 3", note="demoted despite lock-in: tear down"),
            Rule(src, T.RUNNING, S.MOUNTING_INPUT, actions=(A.UNLOCK, A.MOUNT_INPUT),
                 ref=f"§3.2; {REF_LOCKIN_END}",
                 note="started: its own QOS/priority back; Prolog bind-mounts the RAMDISK "
                      "over DATA_IN",
                 branches=(B(C.NO_INPUT, S.MOUNTING_OUTPUT, (A.UNLOCK, A.MOUNT_OUTPUT),
                             note=no_in_out, ref=f"§3.2; {REF_NO_IN}"),)),
            Rule(src, T.FINISHED, S.TEARING_DOWN, actions=(A.UNLOCK, A.DESTROY_FS),
                 ref=REF_CANCELLED, note="cancelled before it started"),
            Rule(src, T.CANCEL_STAGING, S.TEARING_DOWN, actions=(A.UNLOCK, A.DESTROY_FS),
                 effects=(E.MARK_DECLINED,), ref=REF_USER_CANCEL,
                 note="staging cancelled by the user: undo the lock-in, destroy the RAMDISK"),
            Rule(src, T.LOCKIN_EXPIRED, S.TEARING_DOWN,
                 actions=(A.TELL_USER, A.UNLOCK, A.DESTROY_FS), effects=(E.MARK_DECLINED,),
                 ref=REF_LOCKIN_END, note=expired),
            Rule(src, T.JOB_CHANGED, S.TEARING_DOWN,
                 actions=(A.TELL_USER, A.UNLOCK, A.DESTROY_FS), ref=REF_LOCKIN_END,
                 note=changed),
        ]
    r.append(Rule(S.LOCK_FAILED, T.RETRY, S.STAGED_IN, actions=(A.LOCK_IN,), ref=REF_OPERATOR,
                  note="operator: try the lock-in again"))
    return r
