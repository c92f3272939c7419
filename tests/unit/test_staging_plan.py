"""Planning, argv building and manifest comparison of the staging engine (pure)."""

from __future__ import annotations

import base64
import shlex
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from rsa_scheduler.staging.plan import BIG_BYTES, Bucket, assign, make_plan, pending

MIB = 1 << 20


def make_file(name: bytes, size: int = 4096, **kw: Any) -> Entry:
    return Entry(path=name, kind="f", size=size, mode=0o644, mtime_ns=1_700_000_000 * 10**9,
                 **kw)


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


def test_big_files_use_big_writes_into_the_ramdisk_and_small_reads_out_of_it() -> None:
    assert scripts.big_block("stage-in") == scripts.BLOCK_INTO_RAMDISK == "16M"
    assert scripts.big_block("stage-out") == scripts.BLOCK_OUT_OF_RAMDISK == "128K"
    with pytest.raises(ValueError):
        scripts.big_block("verify")
    argv = scripts.big_argv("/ram/job 1", "/pfs/out dir", "128K")
    assert argv[:3] == ["/bin/bash", "-c", scripts.BIG]
    assert argv[3:] == ["bash", "/ram/job 1", "/pfs/out dir", "128K"]
    assert 'bs="$1"' in scripts.BIG and "16M" not in scripts.BIG  # the block is an argument
    assert scripts.big_argv("/a", "/b")[-1] == scripts.BLOCK_INTO_RAMDISK
    # atomic placement hands the block on to the copier as its $3
    wrapped = scripts.atomic_argv(argv, "/ram/job 1", "/ram/job 1/.rsa-staging/0")
    assert wrapped[3:] == ["bash", "/ram/job 1", "/ram/job 1", "/ram/job 1/.rsa-staging/0",
                           scripts.BIG, "128K", "", "", ""]
    whole = scripts.atomic_argv(argv, "/d", "/d/.rsa-staging/0", whole=True)
    assert whole[9] == "whole"
    kept = scripts.atomic_argv(argv, "/d", "/d/.rsa-staging/0", since=99, suffix=".rsa-7")
    assert kept[-2:] == ["99", ".rsa-7"]
    with pytest.raises(ValueError):  # a newer file kept needs a name for the copy
        scripts.atomic_argv(argv, "/d", "/d/.rsa-staging/0", since=99)


def test_index_lines() -> None:
    text = index_lines([("rsa-7-0.tar", make_file(b"a\tb", 3))])
    assert text.splitlines()[1] == "rsa-7-0.tar\tf\t3\ta\\tb"


def tree_buckets(plan_buckets: Sequence[Bucket]) -> dict[bytes, str]:
    """path -> tool of every bucketed path."""
    return {p: b.tool for b in plan_buckets for p in b.paths}


def test_whole_directories_are_copied_recursively() -> None:
    entries = [Entry(b"d%02d" % d, "d") for d in range(20)]
    entries += [make_file(b"d%02d/f%05d" % (i // 500, i)) for i in range(10_000)]
    plan = make_plan(entries, slots=8, trees=True)
    assert {b.tool for b in plan.buckets} == {"tree"}
    assert sorted(p for b in plan.buckets for p in b.paths) == [b"d%02d" % d for d in range(20)]
    assert plan.files == sum(b.files for b in plan.buckets) == 10_000
    assert plan.bytes == 10_000 * 4096
    assert len(plan.dirs) == 20  # still created first and finalised last
    lists = make_plan(entries, slots=8)  # trees off: the same files as lists of names
    assert {b.tool for b in lists.buckets} == {"tar"} and lists.files == 10_000
    tree = scripts.tar_pipe_argv("/a", "/b", recursive=True)
    assert tree[2] == scripts.TREE_PIPE and "--no-recursion" not in tree[2]
    assert "--no-recursion" in scripts.tar_pipe_argv("/a", "/b")[2]


def test_a_directory_is_whole_only_without_big_files_specials_or_outside_links() -> None:
    entries = [Entry(p, "d") for p in (b"a", b"a/b", b"a/b/c", b"a/e", b"big", b"big/sub",
                                       b"lnk", b"lnk/x", b"lnk/y", b"sock", b"empty")]
    entries += [make_file(b"a/b/c/f%d" % i) for i in range(3)]
    entries += [make_file(b"a/e/g"), make_file(b"a/h"), Entry(b"a/l", "l", target=b"h"),
                Entry(b"a/fifo", "p"),
                make_file(b"a/b/in1", nlink=2, inode=(1, 1)),  # both names inside a/
                make_file(b"a/e/in2", nlink=2, inode=(1, 1))]
    entries += [make_file(b"big/huge", 2 * BIG_BYTES), make_file(b"big/sub/s")]
    entries += [make_file(b"lnk/x/1", nlink=2, inode=(1, 2)),
                make_file(b"lnk/y/2", nlink=2, inode=(1, 2)), make_file(b"lnk/y/3")]
    entries += [Entry(b"sock/s", "s"), make_file(b"sock/f"), make_file(b"top")]
    plan = make_plan(entries, slots=2, trees=True)
    tools = tree_buckets(plan.buckets)
    assert tools[b"a"] == "tree"  # highest whole directory: nothing below it is listed
    assert not any(p.startswith(b"a/") for p in tools)
    assert tools[b"big/huge"] == "dd" and tools[b"big/sub"] == "tree"  # big/ is not whole
    # a hard-link group spanning lnk/x and lnk/y keeps both out, but lnk/ holds it whole
    assert tools[b"lnk"] == "tree"
    assert tools[b"sock/f"] == "tar" and b"sock" not in tools  # a socket is skipped
    assert tools[b"top"] == "tar" and b"empty" not in tools
    assert plan.files == 16 and [e.path for e in plan.skipped] == [b"sock/s"]
    (tree,) = [b for b in plan.buckets if b.tool == "tree"]  # small units grouped
    assert tree.paths == (b"a", b"big/sub", b"lnk")
    assert tree.files == 9 + 1 + 3 and tree.bytes == (6 + 1 + 2) * 4096  # links once


def test_hard_links_reaching_out_of_a_directory_keep_it_a_list() -> None:
    entries = [Entry(b"d", "d"), Entry(b"d/sub", "d"), make_file(b"d/sub/a"),
               make_file(b"d/sub/l", nlink=2, inode=(1, 3)),
               make_file(b"outside", nlink=2, inode=(1, 3))]
    plan = make_plan(entries, slots=2, trees=True)
    assert {b.tool for b in plan.buckets} == {"tar"}
    where = {p: b.index for b in plan.buckets for p in b.paths}
    assert where[b"d/sub/l"] == where[b"outside"]


def test_resume_keeps_directories_with_complete_files_out_of_trees() -> None:
    entries = [Entry(b"done", "d"), Entry(b"new", "d"), make_file(b"done/b"),
               make_file(b"new/a"), make_file(b"new/b")]
    plan = make_plan(entries, slots=2, trees=True, complete={b"done/a"})
    tools = tree_buckets(plan.buckets)
    assert tools == {b"done/b": "tar", b"new": "tree"}


def test_a_directory_larger_than_a_stream_share_is_split() -> None:
    entries = [Entry(b"huge", "d"), Entry(b"huge/small", "d"), Entry(b"other", "d")]
    entries += [make_file(b"huge/f%05d" % i) for i in range(9_000)]
    entries += [make_file(b"huge/small/f%d" % i) for i in range(10)]
    entries += [make_file(b"other/f%d" % i) for i in range(990)]
    plan = make_plan(entries, slots=8, trees=True)  # share: 10,000 / 8 = 1,250 files
    tools = tree_buckets(plan.buckets)
    assert b"huge" not in tools and tools[b"huge/small"] == "tree"
    assert tools[b"other"] == "tree" and tools[b"huge/f00000"] == "tar"
    assert plan.files == 10_000
    assert max(b.files for b in plan.buckets if b.tool == "tar") <= 313


def test_scan_program_takes_the_uid_and_trusts_owner_bits() -> None:
    argv = scripts.scan_argv("/ram/j", 1234)
    assert argv[3:] == ["bash", "/ram/j", "1234"]
    assert '-uid "$2"' in argv[2] and "-readable" in argv[2]


NAMES = st.sampled_from([b"a", b"b", b"c d", b"\xff", b"e"])


@st.composite
def scans(draw: st.DrawFn) -> tuple[list[Entry], set[bytes]]:
    """A random tree (as a scan) and a random set of its files already complete."""
    dirs = {b""}
    for _ in range(draw(st.integers(0, 8))):
        parent = draw(st.sampled_from(sorted(dirs)))
        dirs.add((parent + b"/" if parent else b"") + draw(NAMES))
    entries = [Entry(d, "d") for d in sorted(dirs - {b""})]
    for i in range(draw(st.integers(0, 30))):
        parent = draw(st.sampled_from(sorted(dirs)))
        path = (parent + b"/" if parent else b"") + b"f%d" % i
        kind = draw(st.sampled_from(["f", "f", "f", "l", "p", "s"]))
        size = draw(st.sampled_from([0, 4096, 2 * BIG_BYTES])) if kind == "f" else 0
        link = draw(st.integers(0, 3)) if kind == "f" else 0  # 1..3: an inode group
        entries.append(Entry(path, kind, size=size, nlink=2 if link else 1,
                             inode=(1, 1000 + link) if link else (1, i)))
    files = [e.path for e in entries if e.kind != "d"]
    complete = set(draw(st.lists(st.sampled_from(files), max_size=3))) if files else set()
    return [e for e in entries if e.path not in complete], complete


@settings(max_examples=300, deadline=None)
@given(scans(), st.integers(1, 8))
def test_trees_copy_every_object_once_and_keep_link_groups(
        scan: tuple[list[Entry], set[bytes]], slots: int) -> None:
    entries, complete = scan
    plan = make_plan(entries, slots, trees=True, complete=complete)
    trees = {p for b in plan.buckets if b.tool == "tree" for p in b.paths}
    covered: dict[bytes, int] = {}  # object -> bucket that copies it
    for b in plan.buckets:
        if b.tool != "tree":
            for p in b.paths:
                assert p not in covered
                covered[p] = b.index
    for e in entries:
        if e.kind == "d":
            continue
        above = [d for d in trees if e.path.startswith(d + b"/")]
        assert len(above) <= 1  # trees never nest
        if e.kind in ("s", "c", "b"):
            assert not above and e.path not in covered  # skipped, never in a tree
        elif above:
            assert e.path not in covered  # copied once: by its tree only
            assert e.size < BIG_BYTES or e.nlink > 1
        else:
            assert e.path in covered
    for d in trees:  # nothing complete or big below a tree; links stay inside it
        assert not any(p.startswith(d + b"/") for p in complete)
        inside = [e for e in entries if e.path.startswith(d + b"/") and e.kind == "f"]
        for e in inside:
            if e.nlink > 1:
                group = [x for x in entries if x.kind == "f" and x.inode == e.inode]
                assert all(x.path.startswith(d + b"/") for x in group)
    where = {p: b.index for b in plan.buckets for p in b.paths}
    for e in entries:  # a link group outside trees: one list bucket
        if e.kind == "f" and e.nlink > 1 and e.path in covered:
            linked = [x.path for x in entries if x.kind == "f" and x.inode == e.inode]
            assert len({where[p] for p in linked}) == 1
    total = sum(1 for e in entries if e.kind not in ("d", "s", "c", "b"))
    assert plan.files == total


def test_tar_pads_a_short_fraction_of_a_second_and_the_listing_still_parses() -> None:
    """GNU tar drops trailing zeros of the nanoseconds and pads the column with spaces
    (captured: a file whose mtime was 04:48:36.650093400)."""
    listing = (b'-rw-r--r-- 65534/65534       6 2026-11-25 04:48:36.6500934   "./small"\n'
               b'-rw-r--r-- 65534/65534       6 2026-11-25 04:48:36.650093401 "./other"\n')
    small, other = parse_tar_listing(listing)
    assert small.path == b"small" and small.mtime_ns % 10**9 == 650_093_400
    assert other.mtime_ns % 10**9 == 650_093_401
