"""Verify's reading side: content hashes of both trees, and the streamed verify.

Owns :class:`Verifier`: hashes of the RAMDISK's files and of their copies, every command
in parallel over every stream and node, big files in ranges after every node dropped its
cached pages of the destination, the others each dropped from the hashing node's page
cache just before (docs/staging.md); and the verify of a tree too large to
list in rsad, compared on the nodes (``stream.streamed_verify``). ``StagingEngine.verify``
decides which and compares.

Must not import the daemon, the store or Slurm, nor ``engine``.
"""

from __future__ import annotations

import posixpath
import secrets
import threading
from collections.abc import Mapping, Sequence

from rsa_scheduler.hosts import Host
from rsa_scheduler.runner import Completed
from rsa_scheduler.staging import scripts
from rsa_scheduler.staging.commands import Commands, log
from rsa_scheduler.staging.manifest import Entry, Verification, display, parse_hashes
from rsa_scheduler.staging.plan import Bucket, make_plan, stripes
from rsa_scheduler.staging.stream import streamed_verify

# How verify read DATA_OUT's files (rsync, listed or streamed), in the user's message.
READ_BACK = ("every copy read back by an RSA node after it dropped that copy from its page "
             "cache")


class Verifier(Commands):
    """Hashes and compares what a stage-out wrote (``StagingEngine.verify``)."""

    def _stream_verify(self, ramdisk: str, dst: str) -> Verification:
        token = secrets.token_hex(8)
        parts = posixpath.join(dst, scripts.part_dir(self.job_id, token))
        self._user(self.hosts[0], scripts.new_part_argv(dst, self.job_id, token),
                   f"verify: creating the part directory {parts}")

        def run(host: Host, argv: Sequence[str], what: str, *,
                input: str | None = None) -> Completed:
            return self._user(host, argv, what, input=input)

        try:
            result = streamed_verify(self.hosts, run, self._parallel, ram=ramdisk, dst=dst,
                                     parts=parts, level=self.verify_level,
                                     streams=len(self.hosts) * self.parallel_per_node,
                                     drop_bytes=self.verify_range_bytes)
        finally:
            self._stop()
        log.info("%s: %s", self.job_id, result.summary(dst))
        return result

    def _hash(self, root: str, files: Sequence[Entry]) -> dict[bytes, str]:
        out: dict[bytes, str] = {}
        plan = make_plan(files, len(self.hosts) * self.parallel_per_node,
                         big_bytes=self.big_bytes)

        def run(host: Host, b: Bucket) -> None:
            raw = self._user(host, scripts.hash_argv(root), f"verify: hashing in {root}",
                             input=scripts.encode_list(b.paths)).stdout
            out.update(parse_hashes(scripts.decode_output(raw)))

        self._parallel(plan.buckets, run, None)
        return out

    def _hash_both(self, src: str, dst: str, files: Sequence[Entry], have: set[bytes],
                   moved: Mapping[bytes, bytes] | None = None,
                   ) -> tuple[dict[bytes, str], dict[bytes, str]]:
        """Content hashes of ``files`` below ``src`` (the RAMDISK) and of those of them
        present below ``dst``, every command in parallel over every stream and node.
        Files of at least ``verify_range_bytes`` are hashed in ranges (digest: the list of
        range hashes, the same ranges on both sides), after every node wrote back and
        dropped its cached pages of the destination's copy (docs/staging.md), whether or
        not the copy striped them; the destination's other files are each dropped from
        the hashing node's page cache just before it reads them (``READ_BACK``).
        ``moved``: names whose copy below ``dst`` is another one (a copy kept aside,
        ``staging.aside``): that one is hashed, under the name."""
        moved = moved or {}
        back = {alt: name for name, alt in moved.items()}
        streams = len(self.hosts) * self.parallel_per_node
        striped = [e for e in files
                   if self.verify_range_bytes > 0 and e.size >= self.verify_range_bytes]
        big = {e.path for e in striped}
        plan = make_plan([e for e in files if e.path not in big], streams,
                         big_bytes=self.big_bytes)
        out: tuple[dict[bytes, str], dict[bytes, str]] = ({}, {})
        parts: tuple[dict[bytes, list[str]], dict[bytes, list[str]]] = ({}, {})
        lock = threading.Lock()
        dropped = [moved.get(e.path, e.path) for e in striped if e.path in have]
        if dropped:
            for host in self.hosts:  # page caches are per node
                self._user(host, scripts.drop_cache_argv(dst),
                           f"verify: dropping {dst} from the page cache",
                           input=scripts.encode_list(dropped))
        jobs: list[tuple[int, Bucket | tuple[Entry, int, int, int]]] = []
        for e in sorted(striped, key=lambda e: -e.size):
            ranges = stripes(e.size, streams, min_range=self.stripe_min)
            for side in (0, 1) if e.path in have else (0,):
                parts[side][e.path] = [""] * len(ranges)
                jobs += [(side, (e, i, off, n)) for i, (off, n) in enumerate(ranges)]
        jobs += [(side, b) for b in plan.buckets for side in (0, 1)]

        def run(host: Host, job: tuple[int, Bucket | tuple[Entry, int, int, int]]) -> None:
            side, item = job
            root = (src, dst)[side]
            if isinstance(item, tuple):
                e, i, off, n = item
                name = e.path if side == 0 else moved.get(e.path, e.path)
                raw = self._user(host, scripts.hash_range_argv(root, off, n),
                                 f"verify: hashing bytes {off}-{off + n} of "
                                 f"{display(name)!r} in {root}",
                                 input=scripts.encode_list([name])).stdout
                with lock:
                    parts[side][e.path][i] = raw.split()[0] if raw.split() else "?"
                return
            paths = (item.paths if side == 0 else
                     tuple(moved.get(p, p) for p in item.paths if p in have))
            if not paths:
                return
            argv = scripts.hash_argv(root) if side == 0 else scripts.hash_uncached_argv(root)
            raw = self._user(host, argv, f"verify: hashing in {root}",
                             input=scripts.encode_list(paths)).stdout
            got = parse_hashes(scripts.decode_output(raw))
            if side == 1 and back:
                got = {back.get(p, p): h for p, h in got.items()}
            with lock:
                out[side].update(got)

        self._parallel(jobs, run, None)
        for side in (0, 1):
            for path, hashes in parts[side].items():
                out[side][path] = "ranges:" + ",".join(hashes)
        return out
