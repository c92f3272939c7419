"""argv builders for everything the staging engine runs on an RSA node.

Owns nothing itself: it re-exports the programs and builders of its modules, one per
concern, so ``scripts.<NAME>`` names every one of them:

- ``shell``: the prelude, ``bash -c``, the list transport, a user's own script argv;
- ``manifests``: the scan and the content hashes verify reads;
- ``copiers``: the tar pipes, dd, rsync and the site's ``copy_command`` of a bucket;
- ``placement``: directories, part directories, atomic renames, the RAMDISK root;
- ``striping``: big files copied in checked ranges by many streams;
- ``streamed``: the streamed mode's listing, copying and verify on the nodes;
- ``archives``: tar aggregation (packing, listing, hashing members, the index).

User data never reaches a shell as code: each program is a fixed string run as
``bash -c PROGRAM bash ARG...``; paths arrive as positional arguments (``"$1"``), file
lists arrive on stdin as base64 of NUL-separated ``./<name>`` records (so names with
newlines or bytes that are not UTF-8 survive any transport), and binary answers leave
base64-encoded on stdout. Every program runs ``set -o pipefail`` so a failing reader in
a pipe fails the command.

Pure: builds lists, runs nothing. Must not import ``engine``.
"""

from __future__ import annotations

from rsa_scheduler.staging.scripts.archives import (
    FRESH,
    READ,
    TAR_HASH,
    TAR_HASH_MEMBER,
    TAR_LIST,
    TAR_PACK,
    WRITE,
    read_argv,
    tar_hash_argv,
    tar_list_argv,
    tar_pack_argv,
    write_argv,
)
from rsa_scheduler.staging.scripts.copiers import (
    BIG,
    BLOCK_INTO_RAMDISK,
    BLOCK_OUT_OF_RAMDISK,
    COMPARE,
    COPY_PLACEHOLDERS,
    COPY_TOOLS,
    DISCARD,
    RSYNC,
    SETTLE_STAT,
    TAR_PIPE,
    TREE_PIPE,
    UNCHECKED,
    big_argv,
    big_block,
    check_copy_command,
    compare_argv,
    custom_argv,
    custom_program,
    discard_argv,
    parse_settle,
    parse_unchecked,
    rsync_argv,
    settle_stat_argv,
    tar_pipe_argv,
    unchecked_argv,
)
from rsa_scheduler.staging.scripts.manifests import (
    DROP_CACHE,
    DROP_HASH,
    HASH,
    HASH_RANGE,
    HASH_UNCACHED,
    SCAN,
    SCAN_BIG,
    SCAN_CAPPED,
    SCAN_FORMAT,
    drop_cache_argv,
    hash_argv,
    hash_range_argv,
    hash_uncached_argv,
    mounted_argv,
    scan_argv,
    scan_big_argv,
    scan_capped_argv,
)
from rsa_scheduler.staging.scripts.placement import (
    ALWAYS_ASIDE,
    ATOMIC,
    MKDIR,
    MKDIRS,
    NEW_PART,
    PART_DIR,
    REFUSE_LINK,
    REMOVE_DIRS,
    REMOVE_SAME,
    aside_suffix,
    atomic_argv,
    expect_input,
    is_part_dir,
    mkdir_argv,
    mkdirs_argv,
    new_part_argv,
    part_dir,
    part_prefix,
    prepare_root_argv,
    remove_dirs_argv,
    remove_same_argv,
    remove_same_input,
    remove_tree_argv,
    rescue_dir_argv,
    unchecked_name,
)
from rsa_scheduler.staging.scripts.shell import (
    BASH,
    PRELUDE,
    bash,
    decode_output,
    encode_list,
    script_argv,
)
from rsa_scheduler.staging.scripts.streamed import (
    DROP_LISTED,
    QUICK_CHECK,
    STREAM_COPY,
    STREAM_DIRS,
    STREAM_LIST,
    VERIFY_HASH,
    VERIFY_LIST,
    drop_listed_argv,
    stream_copy_argv,
    stream_dir_times_argv,
    stream_list_argv,
    stream_mkdirs_argv,
    verify_hash_argv,
    verify_list_argv,
)
from rsa_scheduler.staging.scripts.striping import (
    CHUNK,
    STRIPE_NEW,
    STRIPE_PLACE,
    STRIPE_RANGE,
    parse_sums,
    stripe_new_argv,
    stripe_place_argv,
    stripe_range_argv,
)

__all__ = [
    "ALWAYS_ASIDE", "ATOMIC", "BASH", "BIG", "BLOCK_INTO_RAMDISK", "BLOCK_OUT_OF_RAMDISK", "CHUNK",
    "COMPARE", "COPY_PLACEHOLDERS", "COPY_TOOLS", "DISCARD", "DROP_CACHE", "DROP_HASH",
    "DROP_LISTED", "FRESH", "HASH", "HASH_RANGE", "HASH_UNCACHED", "MKDIR", "MKDIRS", "NEW_PART",
    "PART_DIR", "PRELUDE", "QUICK_CHECK", "READ", "REFUSE_LINK", "REMOVE_DIRS", "REMOVE_SAME",
    "RSYNC",
    "SCAN", "SCAN_BIG", "SCAN_CAPPED", "SCAN_FORMAT", "SETTLE_STAT", "STREAM_COPY", "STREAM_DIRS",
    "STREAM_LIST", "STRIPE_NEW", "STRIPE_PLACE", "STRIPE_RANGE", "TAR_HASH", "TAR_HASH_MEMBER",
    "TAR_LIST", "TAR_PACK", "TAR_PIPE", "TREE_PIPE", "UNCHECKED", "VERIFY_HASH", "VERIFY_LIST",
    "WRITE", "aside_suffix", "atomic_argv", "bash", "big_argv", "big_block", "check_copy_command",
    "compare_argv", "custom_argv", "custom_program", "decode_output", "discard_argv",
    "drop_cache_argv", "drop_listed_argv", "encode_list", "expect_input", "hash_argv",
    "hash_range_argv", "hash_uncached_argv", "is_part_dir", "mkdir_argv", "mkdirs_argv",
    "mounted_argv", "new_part_argv", "parse_settle", "parse_sums", "parse_unchecked", "part_dir",
    "part_prefix", "prepare_root_argv", "read_argv", "remove_dirs_argv", "remove_same_argv",
    "remove_same_input", "remove_tree_argv", "rescue_dir_argv", "rsync_argv", "scan_argv",
    "scan_big_argv", "scan_capped_argv", "script_argv", "settle_stat_argv", "stream_copy_argv",
    "stream_dir_times_argv", "stream_list_argv", "stream_mkdirs_argv", "stripe_new_argv",
    "stripe_place_argv", "stripe_range_argv", "tar_hash_argv", "tar_list_argv", "tar_pack_argv",
    "tar_pipe_argv", "unchecked_argv", "unchecked_name", "verify_hash_argv", "verify_list_argv",
    "write_argv",
]
