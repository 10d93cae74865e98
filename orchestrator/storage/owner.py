"""One journal, one owner: a second server on a journal a live process owns refuses.

Two servers on one journal would both resume its runs and both write their events:
the second's writes collide with the first's (`UNIQUE constraint failed`), the
first turns read-only, and runs end differently in the database and in `runs`.
So a server owns its journal for its whole life, taken before anything is read,
resumed, written or trimmed:

- **SQLite**: an exclusive `flock` on `<database>.lock`, next to the file, held while
  the server runs. The OS drops it with the process (kill -9, power loss): a holder
  that died never blocks the next start. The file says who holds it (pid, host,
  address), for the refusal's message.
- **Redis without `cluster:`**: a lease, `<prefix>owner` (`SET NX PX`, renewed every
  third of `OWNER_LEASE_SECONDS`), whose value says who holds it and the owner's
  fencing token. A start that finds it held by a process of this host that no longer
  exists takes it over at once; held by a live process — or one on another host,
  which cannot be checked — it refuses, saying when the claim expires if that
  server is gone. Every journal append compares the lease with this server's token
  in the same script that writes (storage/redis.py), so a server whose lease another
  server took (it was paused past it, partitioned) never writes for the journal again.
  A lease that is simply *gone* — Redis restarted without its data, or an outage
  outlasted the lease — is nobody's: the server takes it again, with a new fencing
  token, at its next renewal or as soon as an append is refused for it, and goes on.

Cluster mode shares one journal among its instances by design (a lease per run,
cluster/): no owner. The memory storage belongs to its process anyway.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import trio

from orchestrator.storage.base import Storage, StorageError
from orchestrator.storage.kind import is_redis
from orchestrator.storage.sqlite import SqliteStorage

if TYPE_CHECKING:
    from orchestrator.storage.redis import RedisStorage

__all__ = ["OWNER_LEASE_SECONDS", "Holder", "JournalInUse", "Ownership", "own"]

logger = logging.getLogger(__name__)
OWNER_LEASE_SECONDS = 10.0
"""How long a single server's claim on a Redis journal outlives the server."""

# KEYS: owner. ARGV: the value found, the new value, ms. Takes a claim over (its
# holder is gone) only if nobody else did meanwhile.
_TAKE_OVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""
# KEYS: owner. ARGV: our value, a fresh value, ms. 1: renewed; 2: the claim was gone
# (Redis lost it, or it expired in an outage) and is ours again under the fresh value;
# 0: the claim is someone else's now.
_RENEW = """
local found = redis.call('GET', KEYS[1])
if found == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1 end
if not found then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 2 end
return 0
"""
# KEYS: owner. ARGV: our value. Lets go at a clean shutdown (the next start needs
# no wait).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


class Holder(msgspec.Struct, kw_only=True):
    """Who owns a journal: the server's process and address."""

    pid: int
    host: str
    address: str
    """`host:port` it listens on."""
    since: float
    token: str = ""
    """Redis: the fencing token its appends carry."""

    def describe(self) -> str:
        where = "" if self.host == socket.gethostname() else f" on host {self.host}"
        return f"pid {self.pid}{where} ({self.address})"


def this_server(address: str) -> Holder:
    """The holder this process is, listening on `address`."""
    return Holder(pid=os.getpid(), host=socket.gethostname(), address=address, since=time.time())


class JournalInUse(StorageError):
    """Another live server owns the journal."""

    def __init__(self, journal: str, holder: Holder | None, hint: str = "") -> None:
        who = holder.describe() if holder is not None else "another process"
        super().__init__(
            f"journal {journal} is in use by {who}: stop that server first, or give "
            f"this one other storage{hint}"
        )
        self.holder = holder


class Ownership:
    """This server's claim on its journal (`own`): what its appends are fenced with."""

    def __init__(self, key: str | None = None, token: str = "") -> None:
        self.key = key
        """Redis: the lease key every append checks (None: nothing to check)."""
        self.token = token
        """The claim's value, which every append compares with the lease."""
        self.lost = False
        """The claim went to another server: nothing here may be written any more."""
        self.retaken = 0
        """How often the claim was gone and taken again (a Redis that lost it)."""
        self._renew: Callable[[str, str], Awaitable[object]] | None = None
        self._lock = trio.Lock()
        self._holder: Holder | None = None
        self._journal = ""

    async def renew(self) -> bool:
        """Renew the claim, or take it again if it is gone (with a new fencing token);
        True while it is ours.

        Raises:
            Exception: Redis could not be asked (try again later).
        """
        if self._renew is None or self.lost:
            return not self.lost
        async with self._lock:  # (one value at a time: the renewal and a refused append)
            assert self._holder is not None
            fresh = msgspec.structs.replace(self._holder, token=secrets.token_hex(8))
            value = msgspec.json.encode(fresh).decode()
            found = await self._renew(self.token, value)
            if found == 2:
                self.token, self.retaken = value, self.retaken + 1
                logger.warning(
                    "journal %s: this server's claim was gone (Redis lost it, or an outage "
                    "outlasted it): taken again; events of live runs Redis lost are gone",
                    self._journal,
                )
            elif found != 1:
                self.lost = True
                logger.error(
                    "journal %s: another server took it over; nothing of this one is "
                    "written any more",
                    self._journal,
                )
        return not self.lost


@asynccontextmanager
async def own(storage: Storage, holder: Holder, *, journal: str) -> AsyncIterator[Ownership]:
    """Own the journal on `storage` for the block, or refuse at once.

    Raises:
        JournalInUse: a live server owns it (the message names it).
    """
    if isinstance(storage, SqliteStorage):
        with _locked(storage.path, holder, journal):
            yield Ownership()
    elif is_redis(storage):
        async with _leased(storage, holder, journal) as ownership:
            yield ownership
    else:
        yield Ownership()


@contextlib.contextmanager
def _locked(database: Path, holder: Holder, journal: str) -> Iterator[None]:
    lock = database.with_name(database.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JournalInUse(journal, _read_holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, msgspec.json.encode(holder), 0)
        yield
    finally:
        os.close(fd)  # (and with it the lock)


def _read_holder(fd: int) -> Holder | None:
    try:
        return msgspec.json.decode(os.pread(fd, 4096, 0), type=Holder)
    except (OSError, msgspec.DecodeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, run by another user
        return True
    return True


@asynccontextmanager
async def _leased(storage: RedisStorage, holder: Holder, journal: str) -> AsyncIterator[Ownership]:
    from coredis.tokens import PureToken  # (only where a Redis journal is used)

    client = storage._client
    assert client is not None, "storage is not open"
    key = f"{storage.prefix}owner"
    holder = msgspec.structs.replace(holder, token=secrets.token_hex(8))
    mine = msgspec.json.encode(holder)
    ms = int(OWNER_LEASE_SECONDS * 1000)
    take_over, renew = client.register_script(_TAKE_OVER), client.register_script(_RENEW)
    if not await client.set(key, mine, condition=PureToken.NX, px=ms):
        found = await client.get(key)
        other = _decode(found)
        gone = other is not None and other.host == holder.host and not _alive(other.pid)
        if not (gone and found is not None and await take_over(keys=[key], args=[found, mine, ms])):
            left = max(await client.pttl(key), 0) / 1000
            hint = f" (if it is gone, its claim expires within {left:.0f} s)"
            raise JournalInUse(journal, other, hint)
        logger.warning("journal %s: taking it over from %s, which is gone", journal, other)
    ownership = Ownership(key, mine.decode())
    ownership._holder, ownership._journal = holder, journal

    async def renewed(value: str, fresh: str) -> object:
        return await renew(keys=[key], args=[value, fresh, ms])

    ownership._renew = renewed
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_renew, ownership, journal)
        try:
            yield ownership
        finally:
            nursery.cancel_scope.cancel()
            release = client.register_script(_RELEASE)
            shielded = trio.CancelScope(shield=True)
            with shielded, trio.move_on_after(2), contextlib.suppress(Exception):
                await release(keys=[key], args=[ownership.token])


async def _renew(ownership: Ownership, journal: str) -> None:
    while not ownership.lost:
        await trio.sleep(OWNER_LEASE_SECONDS / 3)
        try:
            await ownership.renew()
        except Exception as exc:  # Redis trouble: the appends are fenced anyway
            logger.warning("journal %s: renewing this server's claim failed: %s", journal, exc)


def _decode(raw: bytes | str | None) -> Holder | None:
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=Holder)
    except msgspec.DecodeError:
        return None
