"""A server on 127.0.0.1 that drips its answer (round 3, M1): it answers every request with 200 and a large
Content-Length, then sends one byte every ``gap`` seconds for as long as the client stays, or drips the status
line itself (``head=True``). Each connection is served by its own thread; ``served`` counts the requests read."""
from __future__ import annotations

import contextlib
import socket
import threading


class Drip:
    def __init__(self, gap: float, head: bool, length: int):
        self.gap, self.head, self.length = gap, head, length
        self.served = 0
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.served += 1
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.length
            try:
                if not self.head:
                    conn.sendall(head)
                while not self.stop.wait(self.gap):
                    conn.sendall(head[:1] if self.head else b"x")
            except OSError:
                return  # the client went away


@contextlib.contextmanager
def drip_server(gap: float = 2.0, head: bool = False, length: int = 10 << 20):
    """``http://127.0.0.1:<port>`` of a dripping server, and the server (``served``)."""
    server = Drip(gap, head, length)
    try:
        yield "http://127.0.0.1:%d" % server.port, server
    finally:
        server.stop.set()
        server.sock.close()
