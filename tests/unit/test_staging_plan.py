"""Planning, argv building and manifest comparison of the staging engine (pure)."""

from __future__ import annotations

import base64
import shlex

import pytest

from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.manifest import (
    Entry,
    compare,
    display,
    index_lines,
    parse_hashes,
    parse_scan,
    parse_tar_listing,
    resolve_tar,
    undisplay,
)
from rsa_scheduler.staging.plan import BIG_BYTES, assign, make_plan, pending

MIB = 1 << 20


def make_file(name: bytes, size: int = 4096, **kw: object) -> Entry:
    return Entry(path=name, kind="f", size=size, mode=0o644, mtime_ns=1_700_000_000 * 10**9,
                 **kw)  # type: ignore[arg-type]


def test_big_files_alone_small_files_grouped_in_path_order() -> None:
    entries = [make_file(b"big%d" % i, 2 * BIG_BYTES) for i in range(3)]
    entries += [make_file(b"d/%05d" % i) for i in range(10_000)]
    plan = make_plan(entries, slots=8)
    big = [b for b in plan.buckets if b.tool == "dd"]
    assert [len(b.paths) for b in big] == [1, 1, 1]
    small = [b for b in plan.buckets if b.tool == "tar"]
    assert len(small) >= 8 * 4 - 1  # several buckets per stream
    assert sum(b.files for b in small) == 10_000
    for b in small:  # path order inside a bucket (directory locality)
        assert list(b.paths) == sorted(b.paths)
    assert plan.files == 10_003
    costs = [b.cost for b in plan.buckets]
    assert costs == sorted(costs, reverse=True)  # most expensive first


def test_hard_links_stay_in_one_bucket_and_use_tar() -> None:
    linked = [make_file(b"a/x", 100 * MIB, nlink=3, inode=(1, 7)),
              make_file(b"m/y", 100 * MIB, nlink=3, inode=(1, 7)),
              make_file(b"z/y", 100 * MIB, nlink=3, inode=(1, 7))]
    small = [make_file(b"s%d" % i, nlink=2, inode=(1, 100 + i // 2)) for i in range(400)]
    plan = make_plan([*linked, *small], slots=16)
    where = {p: b.index for b in plan.buckets for p in b.paths}
    assert len({where[e.path] for e in linked}) == 1
    bucket = plan.buckets[where[b"a/x"]]
    assert bucket.tool == "tar" and bucket.bytes == 100 * MIB  # data counted once
    for i in range(0, 400, 2):
        assert where[b"s%d" % i] == where[b"s%d" % (i + 1)]


def test_dirs_and_specials_are_not_in_buckets() -> None:
    entries = [Entry(b"d", "d"), Entry(b"d/e", "d"), Entry(b"sock", "s"),
               Entry(b"l", "l", target=b"d"), Entry(b"fifo", "p"), make_file(b"d/f")]
    plan = make_plan(entries, slots=2)
    assert [d.path for d in plan.dirs] == [b"d", b"d/e"]
    assert [e.path for e in plan.skipped] == [b"sock"]
    assert sorted(p for b in plan.buckets for p in b.paths) == [b"d/f", b"fifo", b"l"]


def test_assign_balances_by_cost() -> None:
    entries = [make_file(b"f%d" % i, (i + 1) * 64 * MIB) for i in range(8)]
    bins = assign(make_plan(entries, slots=4).buckets, 4)
    loads = sorted(sum(b.bytes for b in g) for g in bins)
    assert loads[-1] - loads[0] <= 64 * MIB * 2


def test_pending_skips_complete_files_and_redoes_partial_ones() -> None:
    src = [Entry(b"d", "d"), make_file(b"d/a", 10), make_file(b"d/b", 10),
           Entry(b"l", "l", target=b"d/a"),
           make_file(b"h1", 5, nlink=2, inode=(1, 9)), make_file(b"h2", 5, nlink=2, inode=(1, 9))]
    dst = [Entry(b"d", "d"), make_file(b"d/a", 10), make_file(b"d/b", 3),  # cut short
           Entry(b"l", "l", target=b"d/a"),
           make_file(b"h1", 5, inode=(2, 1)), make_file(b"h2", 5, inode=(2, 2))]  # link lost
    todo, done = pending(src, dst)
    assert sorted(e.path for e in todo) == [b"d", b"d/b", b"h1", b"h2"]
    assert done == 2


def test_display_round_trips_odd_names() -> None:
    for name in (b"plain", b"sp ace", b"new\nline", b"tab\there", b"\xff\xfe", b"back\\slash",
                 "ünï".encode()):
        text = display(name)
        assert "\n" not in text and "\t" not in text
        assert undisplay(text) == name


def test_parse_scan_records() -> None:
    def rec(*fields: bytes) -> bytes:
        return b"".join(f + b"\0" for f in fields)

    raw = (rec(b"R", b"f", b"4", b"644", b"1700000000.5000000000", b"2", b"42", b"7", b"",
               b"a\nb")
           + rec(b"U", b"d", b"4096", b"700", b"1700000001.0000000000", b"1", b"42", b"8", b"",
                 b"dir")
           + rec(b"R", b"l", b"1", b"777", b"1700000002.0000000000", b"1", b"42", b"9",
                 b"t\xff", b"lnk"))
    f, d, lk = parse_scan(raw)
    assert (f.path, f.kind, f.size, f.mode, f.nlink, f.inode) == (b"a\nb", "f", 4, 0o644, 2,
                                                                   (42, 7))
    assert f.mtime_ns == 1_700_000_000_500_000_000 and f.readable
    assert d.kind == "d" and not d.readable and d.mode == 0o700
    assert lk.target == b"t\xff"


def test_parse_hashes_and_tar_listing() -> None:
    assert parse_hashes(b"ab12  ./x y\0cd34  ./n\nl\0") == {b"x y": "ab12", b"n\nl": "cd34"}
    listing = (b'drwxr-xr-x 1000/1000 0 2024-01-02 03:04:05.5 "./d/"\n'
               b'-rw-r-sr-T 1000/1000 3 2024-01-02 03:04:05 "./d/a \\"b\\"\\n\\377"\n'
               b'hrw-r--r-- 1000/1000 0 2024-01-02 03:04:05 "./d/h" link to "./d/a \\"b\\"'
               b'\\n\\377"\n'
               b'lrwxrwxrwx 1000/1000 0 2024-01-02 03:04:05 "./l -> x" -> "d/a"\n')
    entries = resolve_tar(parse_tar_listing(listing), {b'd/a "b"\n\xff': "ff"}, 0)
    d, a, h, lk = entries
    assert d.path == b"d" and d.mode == 0o755 and d.mtime_s == 1704164645
    assert a.path == b'd/a "b"\n\xff' and a.mode == 0o3654 and a.digest == "ff"
    assert h.path == b"d/h" and h.kind == "f" and h.size == 3 and h.inode == a.inode != (0, 0)
    assert lk.path == b"l -> x" and lk.target == b"d/a"


def test_compare_lists_what_differs_in_one_line() -> None:
    exp = [make_file(b"ok", digest="aa"), make_file(b"short", 100, digest="bb"),
           make_file(b"changed", digest="cc"), make_file(b"gone"), Entry(b"l", "l", target=b"x"),
           Entry(b"d", "d", mode=0o755)]
    act = [make_file(b"ok", digest="aa"), make_file(b"short", 10, digest="bb"),
           make_file(b"changed", digest="zz"), Entry(b"l", "l", target=b"y"),
           Entry(b"d", "d", mode=0o700), make_file(b"extra")]
    v = compare(exp, act, level="content")
    assert not v.ok and v.extra == 1
    whats = {d.path: d.what for d in v.differences}
    assert whats[b"short"].startswith("size 10, expected 100 (truncated)")
    assert whats[b"changed"] == "content differs (hash)"
    assert whats[b"gone"] == "missing"
    assert "symlink target" in whats[b"l"] and "mode 0700" in whats[b"d"]
    line = v.summary("/pfs/out", limit=2)
    assert "\n" not in line and "5 of 6 objects differ" in line and "and 3 more" in line
    meta = compare(exp[:3], act[:3], level="metadata")
    assert [d.path for d in meta.differences] == [b"short"]


def test_compare_checks_hard_links() -> None:
    exp = [make_file(b"a", nlink=2, inode=(1, 5)), make_file(b"b", nlink=2, inode=(1, 5))]
    same = [make_file(b"a", inode=(9, 1)), make_file(b"b", inode=(9, 1))]
    split = [make_file(b"a", inode=(9, 1)), make_file(b"b", inode=(9, 2))]
    assert compare(exp, same, level="metadata").ok
    assert [d.what for d in compare(exp, split, level="metadata").differences] == [
        "hard link broken"]


def test_argv_never_puts_names_in_a_shell_program() -> None:
    argv = scripts.tar_pipe_argv("/pfs/in dir", "/ram/job 1")
    assert argv[:2] == ["/bin/bash", "-c"] and argv[3:] == ["bash", "/pfs/in dir", "/ram/job 1",
                                                           ""]
    assert "pfs" not in argv[2]  # the program is constant; paths are positional
    stdin = scripts.encode_list([b"a b", b"-n\nx\xff"])
    assert base64.b64decode(stdin) == b"./a b\0./-n\nx\xff\0"
    assert scripts.script_argv(["post.sh", "a;b"], "/ram") == ["env", "-C", "/ram", "--",
                                                               "post.sh", "a;b"]
    with pytest.raises(ValueError):
        scripts.script_argv([], "/ram")
    assert shlex.split(shlex.join(scripts.hash_argv("/x")))[2] == scripts.HASH


def test_index_lines() -> None:
    text = index_lines([("rsa-7-0.tar", make_file(b"a\tb", 3))])
    assert text.splitlines()[1] == "rsa-7-0.tar\tf\t3\ta\\tb"


def test_scan_program_takes_the_uid_and_trusts_owner_bits() -> None:
    argv = scripts.scan_argv("/ram/j", 1234)
    assert argv[3:] == ["bash", "/ram/j", "1234"]
    assert '-uid "$2"' in argv[2] and "-readable" in argv[2]
