"""The RSA's mail when a job's output is verified or quarantined (issue 32): whether the
job asked (its MailType), to whom, MailProg called as slurmctld calls it, as SlurmUser;
and the one ``MailUser=... MailType=...`` line of ``scontrol show job``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from rsa_scheduler.daemon.mail import QUARANTINED, VERIFIED, Mailer, recipient, wants_mail
from rsa_scheduler.runner import Completed, Identity
from rsa_scheduler.slurm.cli import parse_job_mail
from rsa_scheduler.slurm.port import SlurmError

pytestmark = pytest.mark.unit

SHOW_JOB = """JobId=7 JobName=sim
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   Comment=x
   MailUser=alice@example.org MailType=END,FAIL
   Power=
"""


def test_the_mail_line_is_read_only_when_it_is_one() -> None:
    assert parse_job_mail(SHOW_JOB) == ("alice@example.org", "END,FAIL")
    assert parse_job_mail(SHOW_JOB.replace("alice@example.org", "(null)")
                          .replace("END,FAIL", "NONE")) == ("", "NONE")
    forged = SHOW_JOB.replace("Comment=x", "Comment=x\n   MailUser=bob MailType=ALL")
    assert parse_job_mail(forged) is None
    assert parse_job_mail("JobId=7\n") is None


@pytest.mark.parametrize("kind,verified,quarantined", [
    ("END", True, True), ("FAIL", False, True), ("ALL", True, True),
    ("BEGIN", False, False), ("NONE", False, False), ("", False, False),
    ("BEGIN,STAGE_OUT", True, True), ("end", True, True)])
def test_what_the_mail_type_asks_for(kind: str, verified: bool, quarantined: bool) -> None:
    assert (wants_mail(kind, VERIFIED), wants_mail(kind, QUARANTINED)) == (verified,
                                                                           quarantined)


def test_the_recipient_is_the_mail_user_or_the_jobs_user_never_an_option() -> None:
    assert recipient("", "alice") == "alice"
    assert recipient("a.b+x@example.org", "alice") == "a.b+x@example.org"
    assert recipient("-oProxyCommand=x", "alice") is None
    assert recipient("a b", "alice") is None


class Inline:
    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fn(*args)
        return Future()


class Slurm:
    def __init__(self, mail: tuple[str, str] | SlurmError | None) -> None:
        self.mail = mail

    def job_mail(self, job_id: str) -> tuple[str, str] | None:
        if isinstance(self.mail, SlurmError):
            raise self.mail
        return self.mail

    def show_config(self) -> dict[str, str]:
        return {"MailProg": "/usr/bin/mail", "SlurmUser": "slurm(64030)"}


class Runs:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str | None, Identity | None]] = []

    def __call__(self, argv: Sequence[str], *, timeout: float, check: bool = True,
                 input: str | None = None, as_user: Identity | None = None,
                 env: Any = None, cwd: str | None = None) -> Completed:
        self.calls.append((list(argv), input, as_user))
        return Completed(tuple(argv), 0, "", "", 0.0)


def mailer(mail: tuple[str, str] | SlurmError | None) -> tuple[Mailer, Runs]:
    runs = Runs()
    slurm_id = Identity(user="slurm", uid=64030, gid=64030)
    return Mailer(Slurm(mail), Inline(), runner=runs,  # type: ignore[arg-type]
                  identity=lambda name: slurm_id), runs


def test_mailprog_is_run_as_slurmctld_runs_it_with_the_message() -> None:
    m, runs = mailer(("", "END"))
    m.notify("7", "alice", VERIFIED, "RSA: stage-out finished: content verified")
    [(argv, body, who)] = runs.calls
    assert argv == ["/usr/bin/mail", "-s", "Slurm Job_id=7 RSA: output verified on the PFS",
                    "alice"]
    assert body is not None and body.startswith("RSA: stage-out finished: content verified")
    assert who is not None and who.user == "slurm"


def test_no_mail_unless_asked_and_none_for_a_job_slurm_forgot() -> None:
    for mail in (("", "BEGIN"), None, SlurmError("Invalid job id specified")):
        m, runs = mailer(mail)
        m.notify("7", "alice", VERIFIED, "verified")
        assert runs.calls == []
    m, runs = mailer(("", "FAIL"))
    m.notify("7", "alice", QUARANTINED, "gave up")
    assert "QUARANTINED" in runs.calls[0][0][2] and "rsa retry 7" in (runs.calls[0][1] or "")
