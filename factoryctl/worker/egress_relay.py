"""The relay a sandboxed run starts with (docs/workers.md, "Network"): run by the system's Python inside
the sandbox, so standard library only, and no import of factoryctl.

``python3 -I egress_relay.py SOCKET [--forward HOST:PORT]... -- ARGV...`` listens on the sandbox's own
loopback (a free port for the proxy, and each ``--forward`` port on 127.0.0.1 and ::1: a loopback model
endpoint a CLI may reach without its proxy setting), then detaches a relay process and executes ARGV
with ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` (and their lower-case forms) naming the proxy port
and ``NO_PROXY`` empty. Each connection is piped to the worker's egress proxy at the Unix socket SOCKET;
a forwarded port's connections first ask the proxy for ``CONNECT HOST:PORT``. The sockets listen before
ARGV starts, so no connection is lost, and the relay ends with the sandbox (bubblewrap's pid namespace
ends when ARGV does).

Start-up is paid by every sandboxed process, so the relay imports only C modules (``_socket``,
``_thread``): ``socket``, ``threading`` and ``contextlib`` cost about 10 ms more per start
(docs/benchmarks.md, "Sandbox").
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

CHUNK = 65536
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
Socket = _socket.socket


def listen(port: int, address: str = "127.0.0.1") -> Socket:
    server = Socket(_socket.AF_INET6 if ":" in address else _socket.AF_INET, _socket.SOCK_STREAM)
    server.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(128)
    return server


def pipe(source: Socket, target: Socket, done: _thread.LockType | None = None) -> None:
    try:
        while data := source.recv(CHUNK):
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:  # noqa: SIM105 - contextlib.suppress would cost its import at every start
            target.shutdown(_socket.SHUT_WR)
        except OSError:
            pass
        if done is not None:
            done.release()


def open_tunnel(path: str, forward: str | None) -> Socket | None:
    upstream = Socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    upstream.connect(path)
    if forward is None:
        return upstream
    upstream.sendall(f"CONNECT {forward} HTTP/1.1\r\nHost: {forward}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 65536:
        data = upstream.recv(4096)
        if not data:
            break
        head += data
    if not head.startswith(b"HTTP/1.1 200"):
        upstream.close()
        return None
    return upstream


def relay(client: Socket, path: str, forward: str | None) -> None:
    try:
        upstream = open_tunnel(path, forward)
    except OSError:
        upstream = None
    if upstream is None:
        client.close()
        return
    back = _thread.allocate_lock()
    back.acquire()
    _thread.start_new_thread(pipe, (upstream, client, back))
    pipe(client, upstream)
    back.acquire()  # the other direction has ended too
    client.close()
    upstream.close()


def serve(server: Socket, path: str, forward: str | None) -> None:
    while True:
        fd, _ = server._accept()  # type: ignore[attr-defined]  # the C socket's accept: a descriptor
        client = Socket(server.family, _socket.SOCK_STREAM, 0, fd)
        _thread.start_new_thread(relay, (client, path, forward))


def detach(servers: list[tuple[Socket, str | None]], path: str) -> None:
    """Fork the relay off (twice: the sandbox's init reaps it, ARGV never sees a child it did not start)."""
    if os.fork() != 0:
        os.wait()
        return
    if os.fork() != 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for server, forward in servers[1:]:
        _thread.start_new_thread(serve, (server, path, forward))
    serve(servers[0][0], path, servers[0][1])


def main(args: list[str]) -> int:
    if "--" not in args or not args or args[0].startswith("-"):
        print("usage: egress_relay.py SOCKET [--forward HOST:PORT]... -- ARGV...", file=sys.stderr)
        return 2
    split = args.index("--")
    path, options, argv = args[0], args[1:split], args[split + 1 :]
    forwards = [options[i + 1] for i, item in enumerate(options) if item == "--forward"]
    servers: list[tuple[Socket, str | None]] = [(listen(0), None)]
    for authority in forwards:
        port = int(authority.rpartition(":")[2])
        problems = []
        for address in ("127.0.0.1", "::1"):
            try:
                servers.append((listen(port, address), authority))
            except OSError as exc:  # no IPv6 on the loopback, say: the other address is enough
                problems.append(f"{address}: {exc}")
        if len(problems) == 2:  # the model is still reached through the proxy variables
            print(f"egress relay: cannot listen on port {port} ({'; '.join(problems)})", file=sys.stderr)
    proxy = f"http://127.0.0.1:{servers[0][0].getsockname()[1]}"
    detach(servers, path)
    for server, _ in servers:
        server.close()
    os.environ.update(dict.fromkeys(PROXY_VARIABLES, proxy))
    os.environ.update({"NO_PROXY": "", "no_proxy": ""})
    if not argv:
        return 0
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - the run's own command, inside its sandbox
    except OSError as exc:
        print(f"egress relay: cannot run {argv[0]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
