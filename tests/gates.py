"""A TCP port in front of a server, that a test can shut and open again, or put on another
address than the server's (a bridge to network namespaces, which cannot reach the root
namespace's 127.0.0.1, where the suite's PostgreSQL and Redis listen)."""

import contextlib
import socket
import threading

from tests.servers import free_port


class Gate:
    """A TCP port in front of a server. Open, it forwards each connection; shut, it
    refuses new ones and cuts those it carries. It listens on ``listen`` and forwards to
    ``target_port`` of ``target_host``."""

    def __init__(
        self, target_port: int, *, listen: str = "127.0.0.1", target_host: str = "127.0.0.1"
    ) -> None:
        self.target = (target_host, target_port)
        self.address = listen
        self.port = free_port(listen)
        self.listener: socket.socket | None = None
        self.carried: list[socket.socket] = []
        self.lock = threading.Lock()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.address, self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def shut(self) -> None:
        assert self.listener is not None
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() below
        self.listener.close()
        self.listener = None
        with self.lock:
            carried, self.carried = self.carried, []
        for sock in carried:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _address = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self.lock:
                self.carried += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)
