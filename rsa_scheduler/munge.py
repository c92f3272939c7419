"""MUNGE credentials for the rsad API, the way Slurm authenticates its own RPCs.

Owns :func:`encode` (client: a credential binding this process's uid/gid to a payload)
and :func:`decode` (server: verify a credential and learn who sent it), through libmunge
(ctypes, ``libmunge.so.2`` from Debian's ``libmunge2``). munged rejects replayed
credentials and expired ones (default TTL 300 s); the API binds each credential to the
request's method, path and body by putting their SHA-256 in the payload.
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


def encode(payload: bytes) -> str:
    """A credential for ``payload`` from this process's uid/gid."""
    lib = _lib()
    cred = ctypes.c_char_p()
    buf = ctypes.create_string_buffer(payload, len(payload))
    err = lib.munge_encode(ctypes.byref(cred), None, buf, len(payload))
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
