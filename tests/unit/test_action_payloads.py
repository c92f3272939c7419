"""Typed action payloads (issue 19): one frozen class per action kind, checked at
construction, and a logged JSON form that reads what earlier versions wrote
(``tests/data/actions/``, captured at 15382da, when ``args`` was a plain mapping)."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from rsa_scheduler.core.actions import PAYLOADS, Action, ActionKind
from rsa_scheduler.core.allocator import Pool, RsaNode
from rsa_scheduler.core.events import Event
from rsa_scheduler.core.hostlist import Hostlist
from rsa_scheduler.core.payloads import (
    AllocateArgs,
    BuildFsArgs,
    CancelArgs,
    MountInputArgs,
    MountMode,
    OnNodes,
    Payload,
    ResetArgs,
    StageInArgs,
    StageOutArgs,
    TellUserArgs,
    VerifyArgs,
    WriteBackArgs,
)
from rsa_scheduler.core.policy import StageOut, Tier
from rsa_scheduler.core.scheduler import Scheduler
from rsa_scheduler.core.states import RsaState
from rsa_scheduler.sim import load_scenario
from tests.unit.corekit import Driver, make_args, make_scheduler, make_spec, obs

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "actions"
ROOT = Path(__file__).resolve().parents[2]
OLD_RECORDS: list[dict[str, Any]] = json.loads((DATA / "old-records.json").read_text())
OLD_LOGS: dict[str, dict[str, Any]] = json.loads((DATA / "old-logs.json").read_text())
#: written by versions before the ones captured from the tree: read, then normalised
LEGACY: dict[str, dict[str, Any]] = {"12/1/stage-in/3": {"atomic": False},
                                     "13/1/build-fs/2": {"tier": None}}
RAM = PurePosixPath("/scratch/a/in")


# ---- one class per kind, no Any ----------------------------------------------------------

def test_every_kind_has_its_own_payload_class() -> None:
    assert set(PAYLOADS) == set(ActionKind)
    assert len(set(PAYLOADS.values())) == len(ActionKind)


def _has_any(hint: object) -> bool:
    return hint is Any or any(_has_any(a) for a in typing.get_args(hint))


CLASSES: list[type[Payload]] = sorted(set(PAYLOADS.values()), key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_no_payload_field_is_any(cls: type[Payload]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        assert not _has_any(hints[f.name]), f"{cls.__name__}.{f.name}: {hints[f.name]}"
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


# ---- checked at construction -------------------------------------------------------------

NODES = Hostlist(("rsa1", "rsa2"))


@pytest.mark.parametrize(("build", "error", "match"), [
    # the old args took any value; each of these reached an executor and failed there
    (lambda: StageInArgs("alice", NODES, "/scratch/a/in", False, None),  # type: ignore[arg-type]
     TypeError, "data_in must be an absolute PurePosixPath"),
    (lambda: StageInArgs("alice", NODES, PurePosixPath("scratch/in"), False, None),
     ValueError, "must be absolute"),
    (lambda: StageInArgs("alice", NODES, None, False, None),
     ValueError, "needs data_in or preprocess"),
    (lambda: StageInArgs("alice", NODES, RAM, False, ["/bin/pre"]),  # type: ignore[arg-type]
     TypeError, "preprocess must be a non-empty tuple"),
    (lambda: StageInArgs("alice", NODES, RAM, 1, None),  # type: ignore[arg-type]
     TypeError, "atomic must be a bool"),
    (lambda: OnNodes("alice", "rsa[1-2]"),  # type: ignore[arg-type]
     TypeError, "nodes must be a Hostlist"),
    (lambda: AllocateArgs(None, NODES),  # type: ignore[arg-type]
     TypeError, "user must be a user name"),
    (lambda: BuildFsArgs("alice", NODES, "ram"),  # type: ignore[arg-type]
     TypeError, "tier must be a node Tier"),
    (lambda: BuildFsArgs("alice", NODES, Tier.AUTO),
     ValueError, "must be a node tier"),
    (lambda: MountInputArgs("alice", NODES, RAM, "union"),  # type: ignore[arg-type]
     TypeError, "mode must be a MountMode"),
    (lambda: StageOutArgs("alice", NODES, RAM, "rsync", None),  # type: ignore[arg-type]
     TypeError, "method must be a StageOut"),
    (lambda: VerifyArgs("alice", NODES, None, StageOut.RSYNC, None),
     ValueError, "needs data_out or postprocess"),
    (lambda: WriteBackArgs("alice", NODES, None),  # type: ignore[arg-type]
     TypeError, "data_in must be an absolute PurePosixPath"),
    (lambda: TellUserArgs("done", "released"),  # type: ignore[arg-type]
     TypeError, "rsa_state must be an RsaState"),
    (lambda: CancelArgs("stage-in"), ValueError, "must be an action id"),
    (lambda: Hostlist(("rsa[1-2]",)), ValueError, "not a node name"),
    (lambda: Hostlist(["rsa1"]), TypeError, "must be a tuple"),  # type: ignore[arg-type]
])
def test_a_field_of_the_wrong_type_is_refused_at_construction(
        build: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        build()


def test_an_action_carries_exactly_its_kinds_payload() -> None:
    stage_out = make_args(ActionKind.STAGE_OUT)
    with pytest.raises(TypeError, match="a verify action carries VerifyArgs"):
        Action("7/1/verify/3", "7", ActionKind.VERIFY, stage_out)
    with pytest.raises(TypeError, match="a stage-in action carries StageInArgs"):
        # the old form: any mapping was accepted here
        Action("7/1/stage-in/3", "7", ActionKind.STAGE_IN,
               {"user": "alice", "nodes": "rsa1"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kind must be an ActionKind"):
        Action("7/1/stage-in/3", "7", "stage-in", stage_out)  # type: ignore[arg-type]
    act = Action("7/1/stage-out/3", "7", ActionKind.STAGE_OUT, stage_out)
    assert act.args_as(StageOutArgs) is stage_out
    assert act.args_as(OnNodes).user == "alice"
    with pytest.raises(TypeError, match="carries StageOutArgs, not VerifyArgs"):
        act.args_as(VerifyArgs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stage_out.user = "bob"  # type: ignore[misc]


# ---- hostlists -----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["rsa[01-04]", "rsa[1-2,5]", "rsa3", "ssd1,rsa[1-2]", ""])
def test_a_hostlist_writes_back_the_text_it_was_read_from(text: str) -> None:
    nodes = Hostlist.parse(text)
    want = NodeSet(text, resolver=RESOLVER_NOGROUP)
    assert nodes.folded == str(want) and nodes.names == tuple(want)
    assert Hostlist.of(reversed(nodes.names)) == nodes  # order and repeats do not matter
    assert Hostlist.parse(text) is nodes  # shared: one parse per distinct text
    assert bool(nodes) is bool(text) and len(nodes) == len(want)


def test_a_hostlist_is_never_a_group_or_garbage() -> None:
    with pytest.raises(ValueError, match="not a hostlist"):
        Hostlist.parse("rsa[1-")
    with pytest.raises(TypeError):
        Hostlist.parse(["rsa1"])  # type: ignore[arg-type]


# ---- the logged form: old records ----------------------------------------------------------

def test_every_kind_has_a_captured_old_record() -> None:
    assert {r["record"]["kind"] for r in OLD_RECORDS} == {k.value for k in ActionKind}


@pytest.mark.parametrize("item", OLD_RECORDS,
                         ids=[f'{r["record"]["kind"]}-{i}' for i, r in enumerate(OLD_RECORDS)])
def test_an_old_record_loads_typed_and_is_written_back_the_same(item: dict[str, Any]) -> None:
    record = item["record"]
    act = Action.from_json(record)
    assert type(act.args) is PAYLOADS[ActionKind(record["kind"])]
    for name, value in record["args"].items():
        typed = getattr(act.args, name)
        if name == "nodes":
            assert isinstance(typed, Hostlist) and typed.folded == value
        elif name in ("data_in", "data_out") and value is not None:
            assert isinstance(typed, PurePosixPath) and str(typed) == value
        elif name in ("preprocess", "postprocess") and value is not None:
            assert typed == tuple(value)
    want = {**record, "args": {**record["args"], **LEGACY.get(record["id"], {})}}
    assert act.to_json() == want  # the same keys, order and values as before
    assert list(act.to_json()["args"]) == list(want["args"]) or record["id"] in LEGACY


@pytest.mark.parametrize(("args", "match"), [
    ({"user": "alice"}, "'nodes' missing"),
    ({"user": "alice", "nodes": "rsa1", "colour": "red"}, "unknown keys colour"),
    ({"user": "alice", "nodes": 7}, "nodes must be a hostlist"),
    ({"user": "alice", "nodes": "rsa[1-"}, "nodes must be a hostlist"),
])
def test_a_broken_record_names_the_action(args: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=f"action 7/1/destroy-fs/3 in the log: .*{match}"):
        Action.from_json({"id": "7/1/destroy-fs/3", "job_id": "7", "kind": "destroy-fs",
                          "args": args})


# ---- the logged form: round trip of every kind --------------------------------------------

VARIANTS: list[tuple[ActionKind, dict[str, Any]]] = [
    (ActionKind.ALLOCATE, {"nodes": Hostlist.parse("rsa[01-03]")}),
    (ActionKind.BUILD_FS, {"tier": Tier.SSD}),
    (ActionKind.BUILD_FS, {}),
    (ActionKind.STAGE_IN, {"atomic": True}),
    (ActionKind.STAGE_IN, {"data_in": None, "preprocess": ("/home/a/pre.sh", "-x")}),
    (ActionKind.LOCK_IN, {}),
    (ActionKind.UNLOCK, {"nodes": Hostlist()}),
    (ActionKind.MOUNT_INPUT, {"mode": MountMode.UNION}),
    (ActionKind.MOUNT_OUTPUT, {"data_in": None}),
    (ActionKind.WRITE_BACK, {}),
    (ActionKind.RESET, {}),
    (ActionKind.STAGE_OUT, {"method": StageOut.TAR}),
    (ActionKind.VERIFY, {"data_out": None, "postprocess": ("/home/a/post.sh",)}),
    (ActionKind.DESTROY_FS, {"nodes": Hostlist.parse("rsa[1-2],ssd1")}),
    (ActionKind.RELEASE, {}),
    (ActionKind.CANCEL, {"target": "7_3/2/stage-in/4"}),
    (ActionKind.TELL_USER, {"message": "stage-out finished",
                            "rsa_state": RsaState.OUTPUT_VERIFIED}),
    (ActionKind.ALERT, {"message": "x: y", "rsa_state": RsaState.QUARANTINED}),
]


def test_the_variants_cover_every_kind() -> None:
    assert {k for k, _ in VARIANTS} == set(ActionKind)


@pytest.mark.parametrize(("kind", "fields"), VARIANTS,
                         ids=[f"{k.value}-{i}" for i, (k, _) in enumerate(VARIANTS)])
def test_every_kind_round_trips_through_the_log(kind: ActionKind,
                                                 fields: dict[str, Any]) -> None:
    act = Action(f"7/1/{kind.value}/3", "7", kind, make_args(kind, **fields))
    back = Action.from_json(json.loads(json.dumps(act.to_json())))
    assert back == act and type(back.args) is type(act.args)


# ---- the core issues typed payloads -------------------------------------------------------

def test_the_core_issues_typed_payloads_for_a_whole_lifecycle() -> None:
    d = Driver(make_scheduler())
    seen = list(d.observe(obs("10", "PENDING", "Resources", make_spec())).actions)
    for _ in range(3):  # build, stage-in, lock-in
        seen += d.answer("10").actions
    seen += d.observe(obs("10", "RUNNING"), at=50).actions
    seen += d.answer("10").actions  # mount-input
    seen += d.tick(700).actions
    seen += d.answer("10").actions  # reset
    seen += d.observe(obs("10", "COMPLETED"), at=800).actions
    while d.sched.records["10"].pending is not None:
        seen += d.answer("10").actions
    assert all(type(a.args) is PAYLOADS[a.kind] for a in seen)
    by_kind = {a.kind: a for a in seen}
    assert {ActionKind.ALLOCATE, ActionKind.BUILD_FS, ActionKind.STAGE_IN,
            ActionKind.LOCK_IN, ActionKind.MOUNT_INPUT, ActionKind.RESET,
            ActionKind.STAGE_OUT, ActionKind.VERIFY, ActionKind.DESTROY_FS,
            ActionKind.RELEASE} <= set(by_kind)
    reset = by_kind[ActionKind.RESET].args_as(ResetArgs)
    assert reset.data_out == PurePosixPath("/pfs/out")
    stage_in = by_kind[ActionKind.STAGE_IN].args_as(StageInArgs)
    assert stage_in.data_in == PurePosixPath("/pfs/in") and stage_in.nodes.names == ("rsa1",)
    assert by_kind[ActionKind.VERIFY].args_as(VerifyArgs).method is StageOut.RSYNC


# ---- old logs and snapshots --------------------------------------------------------------

def _pool(scenario: str) -> tuple[Pool, Any]:
    sc = load_scenario(ROOT / scenario)
    nodes = [RsaNode(name, g.tier, g.capacity) for g in sc.pool
             for name in NodeSet(g.names, resolver=RESOLVER_NOGROUP)]
    return Pool(nodes, sc.allocation), sc.staging


def _events(data: dict[str, Any]) -> list[Event]:
    return [Event(e["time"], e["job_id"], e["name"], e["context"], seq=i + 1)
            for i, e in enumerate(data["events"])]


#: record fields added since the old logs were captured, at the value an old job has
NEW_RECORD_FIELDS: dict[str, Any] = {"writeback_live": False, "end_state": "", "unlock": None,
                                     "unlock_failures": 0, "submitted": "", "restarts": 0,
                                     "superseded": False, "account": "", "rescue_to": "",
                                     "rerun_started": False}


def _with_new_fields(state: dict[str, Any]) -> dict[str, Any]:
    return {"untracked": {}, "draining": "", "mode": "", **state,
            "records": {j: {**NEW_RECORD_FIELDS, **r} for j, r in state["records"].items()}}


@pytest.mark.parametrize("name", sorted(OLD_LOGS))
def test_an_old_log_replays_to_the_state_the_old_version_had(name: str) -> None:
    data = OLD_LOGS[name]
    pool, staging = _pool(data["scenario"])
    sched = Scheduler.replay(pool, staging, _events(data))
    assert sched.durable_state() == _with_new_fields(data["durable_state"])
    pending = [r.pending for r in sched.records.values() if r.pending is not None]
    assert pending and all(type(a.args) is PAYLOADS[a.kind] for a in pending)


@pytest.mark.parametrize("name", sorted(OLD_LOGS))
def test_an_old_snapshot_loads_with_typed_pending_actions(name: str) -> None:
    data = OLD_LOGS[name]
    pool, staging = _pool(data["scenario"])
    sched = Scheduler.replay(pool, staging, [], base=data["durable_state"])
    assert sched.durable_state() == _with_new_fields(data["durable_state"])
    for rec in sched.records.values():
        if rec.pending is not None:
            assert isinstance(rec.pending.args, OnNodes)
            assert rec.pending.args.nodes.folded == rec.nodes
