"""MUNGE credentials for the rsad API, the way Slurm authenticates its own RPCs.

Owns :func:`encode` (client: a credential binding this process's uid/gid to a payload)
and :func:`decode` (server: verify a credential and learn who sent it), through libmunge
(ctypes, ``libmunge.so.2`` from Debian's ``libmunge2``). munged rejects replayed
credentials and expired ones (default TTL 300 s); the API binds each credential to the
request's method, path and body by putting their SHA-256 in the payload. rsad (root)
signs every answer to an authenticated caller with a credential only the caller's uid can
decode (``MUNGE_OPT_UID_RESTRICTION``; munged refuses it to every other uid, root
included, unless built to let root decode anything: :func:`root_decodes_restricted`): a
root credential anyone, or root, could decode would be a root credential for whatever
trusts a MUNGE uid without binding its payload (slurmd).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from typing import NamedTuple

from rsa_scheduler.errors import RsaError

_LIB: ctypes.CDLL | None = None


class MungeError(RsaError):
    """A credential could not be made or verified."""


class Unauthorized(MungeError):
    """munged refuses this process a credential restricted to another uid."""


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        try:  # Debian's soname first: find_library runs ldconfig (a fork per hook run)
            lib = ctypes.CDLL("libmunge.so.2")
        except OSError:
            from ctypes import util

            name = util.find_library("munge")
            try:
                lib = ctypes.CDLL(name or "libmunge.so.2")
            except OSError as e:
                raise MungeError("libmunge not found: install libmunge2 (apt-get install "
                                 "libmunge2) and run munged") from e
        lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int]
        lib.munge_encode.restype = ctypes.c_int
        lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_int),
                                     ctypes.POINTER(ctypes.c_uint),
                                     ctypes.POINTER(ctypes.c_uint)]
        lib.munge_decode.restype = ctypes.c_int
        lib.munge_ctx_create.argtypes = []
        lib.munge_ctx_create.restype = ctypes.c_void_p
        lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
        lib.munge_ctx_destroy.restype = None
        lib.munge_ctx_set.restype = ctypes.c_int  # variadic: arguments typed at the call
        lib.munge_strerror.argtypes = [ctypes.c_int]
        lib.munge_strerror.restype = ctypes.c_char_p
        _LIB = lib
    return _LIB


def _free(ptr: ctypes.c_void_p | ctypes.c_char_p) -> None:
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(ctypes.cast(ptr, ctypes.c_void_p))


def request_digest(method: str, path: str, body: bytes) -> bytes:
    """What a credential vouches for: one request, exactly."""
    return hashlib.sha256(method.encode() + b"\0" + path.encode() + b"\0" + body).digest()


def reply_digest(request_credential: str, status: int, body: bytes) -> bytes:
    """What rsad's reply credential vouches for: this answer (status and body) to the
    request that carried ``request_credential`` (so an old reply cannot be replayed)."""
    return hashlib.sha256(b"reply\0" + request_credential.encode() + b"\0"
                          + str(status).encode() + b"\0" + body).digest()


#: munge.h's munge_opt_t: munged's socket (str), the uid allowed to decode (uid_t)
MUNGE_OPT_SOCKET = 8
MUNGE_OPT_UID_RESTRICTION = 9
#: munge.h's munge_err_t for a credential restricted to another uid
EMUNGE_CRED_UNAUTHORIZED = 18

#: munged's socket; None: libmunge's default (/run/munge/munge.socket.2). The unit tests
#: point it at a munged of their own.
SOCKET: str | None = None


def _context(lib: ctypes.CDLL, restrict_uid: int | None = None) -> int | None:
    """A libmunge context for :data:`SOCKET` and ``restrict_uid``; None: the default."""
    if SOCKET is None and restrict_uid is None:
        return None
    ctx: int | None = lib.munge_ctx_create()
    if not ctx:
        raise MungeError("munge: cannot create a context (out of memory)")
    err = 0
    if SOCKET is not None:
        err = lib.munge_ctx_set(ctypes.c_void_p(ctx), ctypes.c_int(MUNGE_OPT_SOCKET),
                                ctypes.c_char_p(SOCKET.encode()))
    if err == 0 and restrict_uid is not None:
        err = lib.munge_ctx_set(ctypes.c_void_p(ctx), ctypes.c_int(MUNGE_OPT_UID_RESTRICTION),
                                ctypes.c_uint(restrict_uid))
    if err != 0:
        lib.munge_ctx_destroy(ctx)
        raise MungeError(f"munge: cannot set up a context (socket {SOCKET or 'default'}, "
                         f"restricted to uid {restrict_uid}): "
                         f"{lib.munge_strerror(err).decode()}")
    return ctx


def encode(payload: bytes, restrict_uid: int | None = None) -> str:
    """A credential for ``payload`` from this process's uid/gid. ``restrict_uid``: only
    a process of that uid can decode it (munged refuses any other, root included:
    :func:`root_decodes_restricted`)."""
    lib = _lib()
    cred = ctypes.c_char_p()
    buf = ctypes.create_string_buffer(payload, len(payload))
    ctx = _context(lib, restrict_uid)
    try:
        err = lib.munge_encode(ctypes.byref(cred), ctx, buf, len(payload))
    finally:
        if ctx is not None:
            lib.munge_ctx_destroy(ctx)
    if err != 0:
        raise MungeError(f"munge: cannot create a credential: "
                         f"{lib.munge_strerror(err).decode()}; is munged running?")
    try:
        assert cred.value is not None
        return cred.value.decode("ascii")
    finally:
        _free(cred)


class Sender(NamedTuple):
    """Who made a credential (a NamedTuple: dataclasses cost the hooks ~25 ms of imports)."""

    uid: int
    gid: int


def decode(credential: str) -> tuple[Sender, bytes]:
    """Verify a credential; return who made it and its payload."""
    lib = _lib()
    data = ctypes.c_void_p()
    length = ctypes.c_int()
    uid = ctypes.c_uint()
    gid = ctypes.c_uint()
    ctx = _context(lib)
    try:
        err = lib.munge_decode(credential.encode("ascii"), ctx, ctypes.byref(data),
                               ctypes.byref(length), ctypes.byref(uid), ctypes.byref(gid))
    finally:
        if ctx is not None:
            lib.munge_ctx_destroy(ctx)
    try:
        if err == EMUNGE_CRED_UNAUTHORIZED:
            raise Unauthorized(f"munge: credential rejected: "
                               f"{lib.munge_strerror(err).decode()} (it is restricted to "
                               "another uid)")
        if err != 0:
            raise MungeError(f"munge: credential rejected: {lib.munge_strerror(err).decode()}")
        payload = ctypes.string_at(data, length.value) if data.value else b""
        return Sender(uid.value, gid.value), payload
    finally:
        if data.value:
            _free(data)


def root_decodes_restricted() -> bool:
    """Whether munged lets root decode a credential restricted to another uid (a munged
    built with MUNGE_AUTH_ROOT_ALLOW_FLAG; munge's own default, Debian's and every
    release's, refuses: src/munged/dec.c ``dec_validate_auth``). Asked by rsad (root)
    before it signs an answer to a plain user: where root may decode it, the user could
    hand rsad's root credential to slurmd. A probe restricted to uid 65534 (nobody)."""
    other = 65534 if os.geteuid() != 65534 else 65533
    try:
        decode(encode(b"rsad: may root decode a credential restricted to another uid?",
                      restrict_uid=other))
    except Unauthorized:
        return False
    return True


def available() -> bool:
    """munged reachable from this process (used to skip tests with a reason)."""
    try:
        decode(encode(b"ping"))
        return True
    except MungeError:
        return False
    except OSError:
        return False


__all__ = ["MungeError", "Sender", "Unauthorized", "available", "decode", "encode",
           "reply_digest", "request_digest", "root_decodes_restricted"]
