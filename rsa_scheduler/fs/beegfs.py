"""BeeGFS facts the beeond backend and the configuration both need, per major release.

Owns what differs between BeeGFS 7 and 8 as far as BeeOND drives it (read from the
``beeond`` script and the client module of ThinkParQ/beegfs, tags 7.4.7 and 8.3.1): the
per-service config file names ``beeond start -f DIR`` reads, where beeond starts the
services from, the client's mount options (the kernel module refuses any other), and
the port range an instance occupies. Pure data and pure checks: no I/O. Must not import
the backends, the daemon or the configuration.
"""

from __future__ import annotations

from collections.abc import Mapping

MAJORS: tuple[int, ...] = (7, 8)
#: where ``beeond`` starts the services from (its BEEGFS_BIN_PATH, fixed in the script)
SBIN = "/opt/beegfs/sbin"
#: the per-service config files ``beeond start -f DIR`` passes on (``cfgFile=`` / mgmtd's
#: ``--config-file``) when DIR holds them; BeeGFS 8's mgmtd reads TOML and has no helperd
CONFIG_FILES: Mapping[int, tuple[str, ...]] = {
    7: ("beegfs-mgmtd.conf", "beegfs-meta.conf", "beegfs-storage.conf",
        "beegfs-helperd.conf", "beegfs-client.conf"),
    8: ("beegfs-mgmtd.toml", "beegfs-meta.conf", "beegfs-storage.conf",
        "beegfs-client.conf"),
}
#: the services beeond starts from SBIN on a node of the nodefile
SERVICES: Mapping[int, tuple[str, ...]] = {
    7: ("beegfs-mgmtd", "beegfs-meta", "beegfs-storage", "beegfs-helperd"),
    8: ("beegfs-mgmtd", "beegfs-meta", "beegfs-storage"),
}
#: the pseudo mount option that carries an instance's secret to a compute node, which
#: moves it into root-only files (``node.mounts.secret_to_file``) before it mounts
SECRET_OPTION = "rsaConnAuth"
#: BeeGFS 8's ``beeond start -C`` wants the secret under this name in the -f directory
CONN_AUTH_NAME = "conn.auth"

#: the client module's mount options (``MountConfig.c``) that its config file takes as
#: well (the RSA nodes' clients get them through ``beegfs-client.conf``), less the ones
#: rsad sets itself; ``grpid`` is a mount flag only, so it is not offered
MOUNT_OPTIONS: Mapping[int, tuple[str, ...]] = {
    7: ("logStdFile", "tunePreferredMetaFile", "tunePreferredStorageFile",
        "connInterfacesList", "logLevel", "connMgmtdPortUDP", "connMgmtdPortTCP",
        "sysMountSanityCheckMS"),
    8: ("logStdFile", "tunePreferredMetaFile", "tunePreferredStorageFile",
        "connInterfacesList", "connDisableIPv6", "logLevel", "connMgmtdPort",
        "sysMountSanityCheckMS"),
}
#: what rsad sets on every client mount of an instance (a site may not)
RESERVED_OPTIONS = ("sysMgmtdHost", "connPortShift", "connAuthFile",
                    "connDisableAuthentication", "cfgFile")

#: the lowest and highest base port of an instance's services (storage 8003 ... BeeGFS 8's
#: mgmtd gRPC 8010); ``beeond -p SHIFT`` adds SHIFT to each
BASE_PORT_LOW = 8003
BASE_PORT_HIGH = 8010
#: two instances' shifts differ by at least this much, so their port ranges never overlap
SHIFT_STEP = 10
MAX_PORT = 65535


def check_client_option(option: str, major: int) -> None:
    """Raise ValueError (one line) unless ``option`` is ``key=value`` with a client mount
    option of BeeGFS ``major`` that rsad does not set itself."""
    known = MOUNT_OPTIONS[major]
    key, eq, value = option.partition("=")
    if not key or "," in option or any(c.isspace() for c in option):
        raise ValueError(f"{option!r} is not one mount option (key=value, no commas or "
                         "spaces)")
    if key in RESERVED_OPTIONS:
        raise ValueError(f"{key} is set by rsad on every mount; remove it")
    if key not in known:
        raise ValueError(f"{key} is not a mount option of the BeeGFS {major} client "
                         f"(one of {', '.join(sorted(known))})")
    if not (eq and value):
        raise ValueError(f"{key} needs a value ({key}=...)")


def shift_slots(shift_min: int, shift_max: int) -> int:
    """How many instances fit in ``[shift_min, shift_max]`` (one every SHIFT_STEP)."""
    return (shift_max - shift_min) // SHIFT_STEP + 1


def check_shift_range(shift_min: int, shift_max: int) -> None:
    """Raise ValueError (one line) unless every shift of the range keeps every port of an
    instance at most 65535 and the range holds at least one shift."""
    if shift_max < shift_min:
        raise ValueError(f"must be >= port_shift_min ({shift_min})")
    if BASE_PORT_HIGH + shift_max > MAX_PORT:
        raise ValueError(f"{shift_max} would put BeeGFS's port {BASE_PORT_HIGH} at "
                         f"{BASE_PORT_HIGH + shift_max} (> {MAX_PORT}); at most "
                         f"{MAX_PORT - BASE_PORT_HIGH}")


def port_range(shift_min: int, shift_max: int) -> tuple[int, int]:
    """The lowest and highest port any instance of the range may use (for the firewall)."""
    last = shift_min + SHIFT_STEP * (shift_slots(shift_min, shift_max) - 1)
    return BASE_PORT_LOW + shift_min, BASE_PORT_HIGH + last
