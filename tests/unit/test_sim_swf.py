"""The SWF reader: the Parallel Workloads Archive's layout read right, every malformed line
named ``FILE:LINE: message``, and the synthetic generator's output reproducible."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rsa_scheduler.sim.swf import (
    MAX_LISTED,
    SwfReader,
    TraceError,
    guess_size,
    parse_job,
    read_header,
    read_swf,
    scan_swf,
)

DATA = Path(__file__).parent.parent / "data" / "swf"
ROOT = Path(__file__).parent.parent.parent
GOOD = "1 0 12 3600 256 3590.0 1048576 256 7200 -1 1 3 1 -1 1 1 -1 -1"


def test_pwa_layout_header_and_jobs() -> None:
    path = DATA / "pwa-format.swf"
    jobs = list(read_swf(path))
    assert [j.job for j in jobs] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [j.line for j in jobs][:2] == [26, 27]
    first = jobs[0]
    assert (first.submit, first.wait, first.run, first.procs) == (0, 12, 3600, 256)
    assert first.used_memory_kb == 1048576
    assert first.requested_time == 7200 and first.user == 3 and first.status == 1
    assert first.input_bytes is None and first.output_bytes is None
    cancelled = jobs[4]
    assert cancelled.run == -1 and cancelled.wait == -1
    assert cancelled.procs == 32  # allocated unknown: the requested processors
    header = read_header(path)
    assert header.int_field("MaxProcs") == 256 and header.int_field("MaxNodes") == 64
    assert header.fields["TimeZoneString"] == "US/Pacific"
    assert header.fields["Note"].startswith("job 5 was cancelled")  # continuation ignored
    assert header.int_field("Computer") is None


def test_extension_columns() -> None:
    job = parse_job(GOOD + " 1000 2000 64", "t.swf:1", 1)
    assert (job.input_bytes, job.output_bytes, job.output_files) == (1000, 2000, 64)
    unknown = parse_job(GOOD + " -1 -1 -1", "t.swf:1", 1)
    assert unknown.input_bytes is None and unknown.output_files is None


@pytest.mark.parametrize(("line", "message"), [
    ("1 0 12 3600 256", "t.swf:9: 5 fields, SWF has 18 (or 21 with rsa-scheduler's I/O"),
    (GOOD + " 7", "t.swf:9: 19 fields, SWF has 18"),
    (GOOD.replace("3600", "1h", 1), "t.swf:9: field 4 (run time) is '1h', not a number"),
    (GOOD.replace(" 256 ", " -4 ", 1), "t.swf:9: field 5 (allocated processors) is -4: "
     "negative values other than -1 (unknown) are not SWF"),
    (GOOD.replace("3590.0", "nan"), "t.swf:9: field 6 (average CPU time) is 'nan', not a "
     "finite number"),
    ("1.5" + GOOD[1:], "t.swf:9: field 1 (job number) is 1.5: a whole number >= 0"),
    (GOOD.replace(" 1 3 1 ", " 7 3 1 ", 1), "t.swf:9: field 11 (status) is 7: SWF's are "
     "1 completed, 0 failed, 5 cancelled, 2-4 partial executions, -1 unknown"),
    ("1 -1" + GOOD[3:], "t.swf:9: field 2 (submit time) is unknown (-1)"),
    (GOOD + " 10 x 1", "t.swf:9: field 20 (output bytes) is 'x', not a number"),
])
def test_malformed_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "t.swf"
    path.write_text("; Version: 2.2\n" + "; MaxProcs: 256\n" * 7 + line + "\n")
    with pytest.raises(TraceError) as err:
        list(read_swf(path))
    assert str(err.value).startswith(str(path) + message[len("t.swf"):])


def test_every_problem_of_a_line_is_named(tmp_path: Path) -> None:
    bad = GOOD.replace("1 0 12 3600", "x 0 12 1h", 1).replace(" 1 3 1 ", " 9 3 1 ", 1)
    path = tmp_path / "t.swf"
    path.write_text(f"{GOOD}\n{bad}\n")
    with pytest.raises(TraceError) as err:
        list(read_swf(path))
    assert str(err.value) == (
        f"{path}:2: field 1 (job number) is 'x', not a number; field 4 (run time) is "
        "'1h', not a number; field 11 (status) is 9: SWF's are 1 completed, 0 failed, "
        "5 cancelled, 2-4 partial executions, -1 unknown")


def test_jobs_numbered_from_zero_without_a_maxprocs_header() -> None:
    path = DATA / "generated-from-zero.swf"
    jobs = list(read_swf(path))
    assert [j.job for j in jobs] == [0, 1, 2, 3, 4]
    assert read_header(path).int_field("MaxProcs") is None
    guess = guess_size(read_swf(path))
    # jobs 0-2 overlap from t=20 to 70: 8 + 16 + 4 processors at once, more than the
    # largest job's 16
    assert guess is not None
    assert (guess.procs, guess.largest, guess.largest_line, guess.peak) == (28, 16, 13, 28)
    assert guess.describe() == ("28 processors, inferred from the trace: its jobs held 28 "
                                "at once (at 20 s); its largest job (line 13) uses 16")
    assert guess_size([]) is None


def test_status_and_queue_fields_of_the_archive() -> None:
    path = DATA / "pwa-checkpoint.swf"
    with path.open() as stream:
        reader = SwfReader(stream, str(path))
        jobs = list(reader)
    # job 1's two partial executions (status 2, 3) are passed over: its summary line
    # stands for the whole job, which would otherwise be submitted three times
    assert [j.job for j in jobs] == [1, 2, 3, 4, 5] and reader.partial == 2
    assert [j.status for j in jobs] == [1, 5, 1, -1, 0]
    assert [j.queue for j in jobs] == [1, 1, 0, 1, 1]  # queue 0: interactive
    assert jobs[0].run == 600


def test_submit_order(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    second = GOOD.replace("1 0 12", "2 100 12", 1)
    third = GOOD.replace("1 0 12", "3 50 12", 1)
    path.write_text(f"{GOOD}\n\n{second}\n{third}\n")
    with pytest.raises(TraceError, match=r"t\.swf:4: submit time 50 is before the previous "
                                         r"job's 100: SWF lists jobs in submit order"):
        list(read_swf(path))


def test_unreadable(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.swf: cannot read trace"):
        list(read_swf(tmp_path / "nope.swf"))
    binary = tmp_path / "bin.swf"
    binary.write_bytes(b"; Version: 2.2\n\xff\xfe 1 2\n")
    with pytest.raises(TraceError, match=r"bin\.swf: cannot read trace: not UTF-8 text"):
        list(read_swf(binary))


def test_lazy_reading_stops_at_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    path.write_text(f"{GOOD}\nbroken\n")
    it = iter(read_swf(path))
    assert next(it).job == 1  # the good line comes out before the bad one is read
    with pytest.raises(TraceError, match=r"t\.swf:2: 1 fields"):
        next(it)


def test_generator_reproduces_the_shipped_trace(tmp_path: Path) -> None:
    shipped = DATA / "small.swf"
    cmd = shipped.read_text().splitlines()[2].removeprefix("; Installation: ").split()
    assert cmd[0] == "bench/gen_swf.py"
    out = tmp_path / "again.swf"
    subprocess.run([sys.executable, str(ROOT / cmd[0]), *cmd[1:], "-o", str(out)],
                   check=True)
    assert out.read_bytes() == shipped.read_bytes()
    jobs = list(read_swf(out))
    assert len(jobs) == 300 and all(j.input_bytes is not None for j in jobs)
    assert any(j.output_files and j.output_files > 1 for j in jobs)  # --fpp 0.2


def test_every_bad_line_is_reported_not_only_the_first(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    two_problems = GOOD.replace("1 0 12 3600", "2 10 12 1h", 1).replace(" 1 3 1 ", " 9 3 1 ",
                                                                        1)
    short = "3 20 0 10 4"
    early = GOOD.replace("1 0 12", "4 5 12", 1)
    backwards = GOOD.replace("1 0 12", "5 1 12", 1)
    path.write_text("; Version: 2.2\n; MaxProcs: 256\n;\n"
                    f"{GOOD.replace('1 0 12', '1 8 12', 1)}\n{two_problems}\n{short}\n"
                    f"{early}\n{backwards}\n")
    with pytest.raises(TraceError) as err:
        scan_swf(path)
    assert str(err.value).splitlines() == [
        f"{path}:5: field 4 (run time) is '1h', not a number; field 11 (status) is 9: "
        "SWF's are 1 completed, 0 failed, 5 cancelled, 2-4 partial executions, -1 unknown",
        f"{path}:6: 5 fields, SWF has 18 (or 21 with rsa-scheduler's I/O columns)",
        f"{path}:7: submit time 5 is before the previous job's 8: SWF lists jobs in submit "
        "order",
        f"{path}:8: submit time 1 is before the previous job's 8: SWF lists jobs in submit "
        "order"]


def test_many_bad_lines_are_listed_up_to_a_bound_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    path.write_text(GOOD + "\n" + "x\n" * (MAX_LISTED + 5))
    with pytest.raises(TraceError) as err:
        scan_swf(path)
    lines = str(err.value).splitlines()
    assert len(lines) == MAX_LISTED + 1
    assert lines[0] == f"{path}:2: 1 fields, SWF has 18 (or 21 with rsa-scheduler's I/O " \
        "columns)"
    assert lines[-1] == f"{path}: 5 more bad lines not shown ({MAX_LISTED + 5} in all)"


def test_scan_infers_the_size_and_refuses_a_trace_without_jobs(tmp_path: Path) -> None:
    zero = DATA / "generated-from-zero.swf"
    scan = scan_swf(zero, size=True)
    assert (scan.jobs, scan.partial) == (5, 0) and scan.size == guess_size(read_swf(zero))
    assert scan_swf(zero).size is None  # not asked for
    assert scan_swf(DATA / "pwa-checkpoint.swf").partial == 2
    empty = tmp_path / "e.swf"
    empty.write_text("; Version: 2.2\n; MaxProcs: 8\n")
    with pytest.raises(TraceError) as err:
        scan_swf(empty)
    assert str(err.value) == (f"{empty}: no jobs, only 2 lines of comments: an SWF trace "
                              "has one line of 18 numbers per job")
    with pytest.raises(TraceError, match=r"nope\.swf: cannot read trace"):
        scan_swf(tmp_path / "nope.swf")


def test_a_job_allocated_no_processors_never_ran() -> None:
    # a cancelled job that never started, written with run time 0 and 0 processors
    # allocated (16 requested): it held none, so it is skipped (and says nothing of the
    # cluster)
    cancelled = parse_job("7 50 30 0 0 -1 -1 16 600 -1 5 2 1 -1 1 1 -1 -1", "t.swf:9", 9)
    assert cancelled.procs == -1 and cancelled.status == 5
    unknown = parse_job("8 50 30 100 -1 -1 -1 16 600 -1 1 2 1 -1 1 1 -1 -1", "t.swf:9", 9)
    assert unknown.procs == 16  # allocated unknown: the request stands for it
    assert guess_size([cancelled]) is None
