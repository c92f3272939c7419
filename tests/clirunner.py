"""One CliRunner for every CLI test, on the click the package meets: Debian 12's 8.1
mixes stderr into stdout unless told not to (8.2 keeps them apart and dropped the
option); the tests read ``result.stderr`` either way (tests/install/ runs them on 8.1)."""

from __future__ import annotations

import inspect

from click.testing import CliRunner


def cli_runner() -> CliRunner:
    if "mix_stderr" in inspect.signature(CliRunner.__init__).parameters:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg,unused-ignore]
    return CliRunner()
