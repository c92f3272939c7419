"""Mail to a job's user when its output is verified or quarantined (issue 32).

Slurm mails a job's end when the job asked (``--mail-type``/``--mail-user``), but that is
before the output has left the RAMDISK. This module owns the RSA's own mail, sent when
the output is verified on the PFS or quarantined: whether the job asked for it
(:func:`wants_mail`: a MailType of END, FAIL, ALL or STAGE_OUT; FAIL alone only for a
quarantine), to whom (:func:`recipient`: its MailUser, else its user, as Slurm does), the
subject and body, and :class:`Mailer`, which sends it through the site's own ``MailProg``
(read from ``scontrol show config``) run as ``SlurmUser``, as slurmctld runs it. Mail is
sent at most once per outcome (lost if rsad dies in between). Slurm forgets a job
``MinJobAge`` after its end, and a stage-out may outlast that: so what the job asked for
is read when its stage-out begins (:meth:`Mailer.remember`, while Slurm still has the
job) and kept by rsad as a fact of the job (durable: an event, replayed after a
restart); the outcome's mail uses it, else asks Slurm then.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from concurrent.futures import Executor

from rsa_scheduler.errors import RsaError
from rsa_scheduler.runner import CommandError, Identity, LocalRunner, Runner
from rsa_scheduler.slurm.port import MailSource, SlurmError

log = logging.getLogger(__name__)

VERIFIED, QUARANTINED = "verified", "quarantined"
#: the MailType words that ask for each outcome's mail (Slurm's STAGE_OUT: "burst buffer
#: stage out and teardown completed", the closest it has)
ASKS: dict[str, frozenset[str]] = {
    VERIFIED: frozenset({"END", "ALL", "STAGE_OUT"}),
    QUARANTINED: frozenset({"END", "FAIL", "ALL", "STAGE_OUT"}),
}
#: a recipient handed to MailProg as one argument: an address or a user name, no option
_ADDRESS = re.compile(r"^[A-Za-z0-9_.+=@%][A-Za-z0-9_.+=@%-]*$")


def wants_mail(mail_type: str, outcome: str) -> bool:
    """Whether a job with ``mail_type`` (Slurm's ``MailType``, e.g. ``END,FAIL``) asked
    for mail of ``outcome``."""
    return bool(set(mail_type.upper().split(",")) & ASKS[outcome])


def recipient(mail_user: str, job_user: str) -> str | None:
    """Whom to mail: the job's ``MailUser``, else its user; None for a name MailProg could
    take for an option or several arguments."""
    to = mail_user or job_user
    return to if _ADDRESS.match(to) else None


def subject(job_id: str, outcome: str) -> str:
    what = ("output verified on the PFS" if outcome == VERIFIED
            else "output QUARANTINED on its RAMDISK (not on the PFS)")
    return f"Slurm Job_id={job_id} RSA: {what}"


def body(job_id: str, outcome: str, message: str) -> str:
    then = ("Its files are in place: steps that read them may run.\n" if outcome == VERIFIED
            else f"Do not read its output yet. Once the cause is fixed, ask your operator "
                 f"to run 'rsa retry {job_id}', which stages it out again; the data is kept "
                 "until then.\n")
    return f"{message}\n\n{then}'rsa job {job_id}' shows where the output is.\n"


def mailprog_argv(prog: str, subj: str, to: str) -> list[str]:
    """MailProg as slurmctld calls it: ``MailProg -s SUBJECT RECIPIENT``, body on stdin."""
    return [prog, "-s", subj, to]


class Mailer:
    """Sends the outcome mails on ``lane`` (rsad's message lane), one Slurm read and one
    MailProg run each; the site's MailProg and SlurmUser are read once."""

    def __init__(self, slurm: MailSource, lane: Executor, *, runner: Runner | None = None,
                 timeout: float = 30.0,
                 identity: Callable[[str], Identity] = Identity.of) -> None:
        self.slurm = slurm
        self.lane = lane
        self.runner: Runner = runner or LocalRunner()
        self.timeout = timeout
        self.identity = identity
        self._site: tuple[str, Identity] | None = None

    def notify(self, job_id: str, user: str, outcome: str, message: str,
               asked: tuple[str, str] | None = None) -> None:
        """Any thread: mail the job's user about ``outcome`` if the job asked for it
        (``asked``: its (MailUser, MailType) as remembered; None: ask Slurm now)."""
        self.lane.submit(self._send, job_id, user, outcome, message, asked)

    def remember(self, job_id: str,
                 record: Callable[[str, tuple[str, str]], None]) -> None:
        """Any thread: read now, while Slurm still has the job, the mail it asked for,
        and hand it to ``record`` (which makes it durable) if it asked for any mail of
        the RSA's."""
        self.lane.submit(self._remember, job_id, record)

    def _remember(self, job_id: str,
                  record: Callable[[str, tuple[str, str]], None]) -> None:
        try:
            asked = self.slurm.job_mail(job_id)
        except SlurmError as e:
            log.info("job %s: what mail it asked for is not known (%s): asked again "
                     "when its output is verified", job_id, e)
            return
        if asked is not None and any(wants_mail(asked[1], o) for o in ASKS):
            record(job_id, asked)

    def _mailprog(self) -> tuple[str, Identity] | None:
        if self._site is None:
            config = self.slurm.show_config()
            prog = config.get("MailProg", "")
            slurm_user = config.get("SlurmUser", "").partition("(")[0]
            if not prog or prog == "(null)" or not slurm_user:
                log.warning("no MailProg or SlurmUser in Slurm's configuration: the RSA "
                            "sends no mail")
                return None
            self._site = (prog, self.identity(slurm_user))
        return self._site

    def _send(self, job_id: str, user: str, outcome: str, message: str,
              asked: tuple[str, str] | None = None) -> None:
        try:
            if asked is None:
                asked = self.slurm.job_mail(job_id)
            if asked is None or not wants_mail(asked[1], outcome):
                return
            to = recipient(asked[0], user)
            if to is None:
                log.warning("job %s: no %s mail: MailUser %r is not one address", job_id,
                            outcome, asked[0])
                return
            site = self._mailprog()
            if site is None:
                return
            prog, as_user = site
            self.runner(mailprog_argv(prog, subject(job_id, outcome), to),
                        timeout=self.timeout, input=body(job_id, outcome, message),
                        as_user=as_user)
            log.info("job %s: %s mail sent to %s through %s", job_id, outcome, to, prog)
        except SlurmError as e:
            log.warning("job %s: no %s mail: Slurm no longer says what mail it asked for "
                        "(MinJobAge passed?): %s", job_id, outcome, e)
        except (CommandError, RsaError, OSError) as e:
            log.warning("job %s: the %s mail failed: %s", job_id, outcome, e)
