"""The egress proxy a worker runs outside a run's sandbox (docs/workers.md, "Network").

It listens on a Unix socket in the run's egress directory, which is bound into the sandbox; the relay
inside (:mod:`factoryctl.worker.egress_relay`) pipes the sandbox's loopback connections to it. Two request
forms are served: ``CONNECT host:port`` (HTTPS, git over https: a byte tunnel once allowed) and an
absolute-form plain-HTTP request (``GET http://host/path``), forwarded with ``Connection: close``.

Each request is judged twice: the named destination by the run's
:class:`~factoryctl.worker.netpolicy.EgressRules` before any DNS, then every address it resolves to by
``refusal`` (the address rules of outbound notifications: docs/notifications.md, "Where a notification
may be sent"), unless the destination is explicit (listed by name, or the model endpoint). Only an
address that passed is connected to, so a second DNS answer cannot swap it. A refusal answers 403 and
is reported once per destination (``on_refused``), at most :data:`MAX_REFUSED` destinations per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from factoryctl.worker.netpolicy import HTTP_PORT, HTTPS_PORT, EgressRules, normal_host, split_host_port

log = logging.getLogger("factoryctl.worker")

AddressCheck = Callable[[str], "str | None"]
"""``refusal(ip)``: why a non-explicit destination may not connect to the address ``ip``, or None."""
RefusalSink = Callable[[str, int, str], Awaitable[None]]
"""``on_refused(host, port, reason)``."""
Resolver = Callable[[str, int], Awaitable[list[tuple[Any, ...]]]]
"""``resolve(host, port)``: ``getaddrinfo``'s answer for a stream socket (tests give a scripted one)."""

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 15.0
DRAIN_SECONDS = 30.0  # after one direction of a tunnel ended, how long the other may still run
MAX_REFUSED = 100
CHUNK = 64 * 1024
_GLOBAL_V6 = ipaddress.ip_network("2000::/3")
_HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te"})


def public_only(address: str) -> str | None:
    """A strict address rule for a worker whose entry point gave none: anything but a global unicast
    address is refused; an IPv6 address carrying an IPv4 one (mapped, 6to4) is judged as that one, and
    Teredo and IPv6 outside 2000::/3 (NAT64 among them) are refused outright."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        carried = ip.ipv4_mapped or ip.sixtofour
        if carried is not None:
            ip = carried
        elif ip.teredo is not None or ip not in _GLOBAL_V6:
            return f"{ip} is not a public address"
    return None if ip.is_global and not ip.is_multicast else f"{ip} is not a public address"


class Refused(Exception):
    """A destination the run may not reach; ``reason`` is what the event says."""


class EgressProxy:
    """One run's proxy: ``rules`` decide by name, ``refusal`` by address."""

    def __init__(
        self,
        rules: EgressRules,
        socket_path: Path,
        *,
        refusal: AddressCheck,
        on_refused: RefusalSink,
        resolve: Resolver | None = None,
    ) -> None:
        self.rules, self.socket_path, self.refusal, self.on_refused = rules, socket_path, refusal, on_refused
        self.resolve = resolve or _getaddrinfo
        self.refused: dict[tuple[str, int], str] = {}
        self.unrecorded = 0  # refused destinations past MAX_REFUSED
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.socket_path))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        if len(head) > MAX_HEAD_BYTES:
            return await _answer(writer, 431, "request head too large")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return await _answer(writer, 400, "malformed request line")
        method, target, _version = parts
        try:
            if method == "CONNECT":
                host, port = split_host_port(target, HTTPS_PORT)
                path = None
            else:
                host, port, path = _absolute(target)
        except ValueError as exc:
            return await _answer(writer, 400, str(exc))
        assert port is not None
        try:
            upstream = await self._connect(host, port)
        except Refused as exc:
            await self._refused(host, port, str(exc))
            return await _answer(writer, 403, f"egress to {host}:{port} refused: {exc}")
        except OSError as exc:
            return await _answer(writer, 502, f"cannot reach {host}:{port}: {exc.strerror or exc}")
        up_reader, up_writer = upstream
        try:
            if path is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_forwarded_head(method, path, lines[1:]))
            await _tunnel(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        decision = self.rules.decide(host, port)
        if not decision.allowed:
            raise Refused(decision.reason or "not allowed")
        name = normal_host(host)
        loop = asyncio.get_running_loop()
        try:
            infos = await self.resolve(name, port)
        except socket.gaierror as exc:
            raise OSError(f"cannot resolve {name}: {exc.strerror}") from None
        why, last = None, None
        for family, kind, proto, _canon, sockaddr in infos:
            address = str(sockaddr[0])
            if not decision.explicit:
                why = self.refusal(address)
                if why is not None:
                    continue
            try:
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                try:
                    await asyncio.wait_for(loop.sock_connect(sock, sockaddr), CONNECT_TIMEOUT_SECONDS)
                except BaseException:
                    sock.close()
                    raise
                return await asyncio.open_connection(sock=sock, limit=CHUNK)
            except (OSError, TimeoutError) as exc:
                last = exc
        if last is None and why is not None:
            raise Refused(why)
        raise OSError(str(last) if last else f"{name} has no address")

    async def _refused(self, host: str, port: int, reason: str) -> None:
        key = (host.lower(), port)
        if key in self.refused:
            return
        if len(self.refused) >= MAX_REFUSED:
            self.unrecorded += 1
            return
        self.refused[key] = reason
        try:
            await self.on_refused(host, port, reason)
        except Exception:  # the event is best effort; the refusal itself already happened
            log.exception("cannot record a refused egress destination")


async def _getaddrinfo(host: str, port: int) -> list[tuple[Any, ...]]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(infos)


def _absolute(target: str) -> tuple[str, int, str]:
    """``(host, port, origin-form path)`` of an absolute-form ``http://`` target."""
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("only absolute http:// requests and CONNECT are proxied")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, parts.port or HTTP_PORT, path


def _forwarded_head(method: str, path: str, headers: list[str]) -> bytes:
    kept = [h for h in headers if h and h.split(":", 1)[0].strip().lower() not in _HOP_HEADERS]
    return "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]).encode("latin-1")


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Header Too Large", 502: "Bad Gateway"}
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


async def _tunnel(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until both ends closed (the second at most :data:`DRAIN_SECONDS` after the first)."""
    pipes = {asyncio.ensure_future(_pipe(reader, up_writer)), asyncio.ensure_future(_pipe(up_reader, writer))}
    try:
        _done, pending = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        if pending:
            await asyncio.wait(pending, timeout=DRAIN_SECONDS)
    finally:
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
