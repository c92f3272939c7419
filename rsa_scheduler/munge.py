"""MUNGE credentials for the rsad API, the way Slurm authenticates its own RPCs.

Owns :func:`encode` (client: a credential binding this process's uid/gid to a payload)
and :func:`decode` (server: verify a credential and learn who sent it), through libmunge
(ctypes, ``libmunge.so.2`` from Debian's ``libmunge2``). munged rejects replayed
credentials and expired ones (default TTL 300 s); the API binds each credential to the
request's method, path and body by putting their SHA-256 in the payload. rsad (root)
signs an answer with a credential only the caller's uid can decode
(``MUNGE_OPT_UID_RESTRICTION``): a root credential anyone could decode would be a root
credential for whatever trusts a MUNGE uid without binding its payload.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import NamedTuple

from rsa_scheduler.errors import RsaError

_LIB: ctypes.CDLL | None = None


class MungeError(RsaError):
    """A credential could not be made or verified."""


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


#: munge.h's munge_opt_t: the uid allowed to decode a credential (uid_t)
MUNGE_OPT_UID_RESTRICTION = 9


def encode(payload: bytes, restrict_uid: int | None = None) -> str:
    """A credential for ``payload`` from this process's uid/gid. ``restrict_uid``: only
    a process of that uid can decode it (munged refuses any other, root included)."""
    lib = _lib()
    cred = ctypes.c_char_p()
    buf = ctypes.create_string_buffer(payload, len(payload))
    ctx: int | None = None
    if restrict_uid is not None:
        ctx = lib.munge_ctx_create()
        if not ctx:
            raise MungeError("munge: cannot create a context (out of memory)")
    try:
        if ctx is not None and restrict_uid is not None:
            err = lib.munge_ctx_set(ctypes.c_void_p(ctx),
                                    ctypes.c_int(MUNGE_OPT_UID_RESTRICTION),
                                    ctypes.c_uint(restrict_uid))
            if err != 0:
                raise MungeError(f"munge: cannot restrict a credential to uid {restrict_uid}: "
                                 f"{lib.munge_strerror(err).decode()}")
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
    err = lib.munge_decode(credential.encode("ascii"), None, ctypes.byref(data),
                           ctypes.byref(length), ctypes.byref(uid), ctypes.byref(gid))
    try:
        if err != 0:
            raise MungeError(f"munge: credential rejected: {lib.munge_strerror(err).decode()}")
        payload = ctypes.string_at(data, length.value) if data.value else b""
        return Sender(uid.value, gid.value), payload
    finally:
        if data.value:
            _free(data)


def available() -> bool:
    """munged reachable from this process (used to skip tests with a reason)."""
    try:
        decode(encode(b"ping"))
        return True
    except MungeError:
        return False
    except OSError:
        return False


__all__ = ["MungeError", "Sender", "available", "decode", "encode", "request_digest"]
