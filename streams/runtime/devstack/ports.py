"""Free loopback ports for the servers the dev stack and the tests start."""

from __future__ import annotations

import errno
import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_taken(host: str, port: int) -> bool:
    """Whether another process listens on ``host:port``, as binding the query service's socket
    would find (uvicorn binds with SO_REUSEADDR, so a port that only lingers in TIME_WAIT
    counts as free). Only "address in use" counts: an address this machine does not have is
    the server's own error to report."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except OSError:
        return False
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
        return False


def wait_for_port(port: int, timeout: float) -> bool:
    """True once something accepts connections on the port, False after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False
