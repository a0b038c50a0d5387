"""`tuner proxy`: Optuna's gRPC storage proxy in front of a database server, for many workers.

Workers given `--storage grpc://HOST:PORT` talk to one proxy process, which alone holds database
connections (its pool, plus one per study while a trial of it is being claimed). Optuna 5.1's proxy
forwards the storage calls only: its client (GrpcStorageProxy) is no BaseHeartbeat, so a worker behind
it records no heartbeat, `fail_stale_trials` does nothing, and RDBStorage never counts a trial without
a heartbeat row as stale. A worker killed there would leave its trial RUNNING forever, and with a
study-wide budget every other worker would wait for it. So the proxy serves three more calls beside
Optuna's service, on the same port (service engine_tuner.Proxy, raw bytes, no generated code):

- Settings: the heartbeat interval and grace period of the proxy's database storage (the workers use
  those, so a worker's interval always fits the grace period that judges it);
- RecordHeartbeat / StaleTrialIds: RDBStorage's own heartbeat calls, so `study.optimize` on a worker runs
  its heartbeat thread and every claim fails stale trials and queues their retry, as on the database;
- HoldClaim: the claim lock of tuner.run.claims. The proxy takes the same PostgreSQL advisory lock
  (ClaimLock) while the worker's stream stays open; a worker that dies closes the stream and the
  proxy lets go. Workers on the database directly and behind proxies exclude each other.
"""
from __future__ import annotations

import errno
import json
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import optuna

from ..errors import UserError
from ..store.optuna_private import grpc_proxy_service, stale_trial_ids
from ..store.proxy_client import (
    BUSY,
    DEFAULT_PORT,
    GRANTED,
    GRPC_PREFIX,
    PIP_HINT,
    RESERVED,
    SERVICE,
    THREADS,
    _first_line,
    _grpc,
    _target,
)
from ..store.storage import STUDY_NAME, StorageURL, open_storage
from .claims import ClaimLock


class TunerProxyService:
    """The engine_tuner.Proxy calls over the proxy's database storage (see the module's docstring)."""

    def __init__(self, storage, url: str, heartbeat: dict):
        self.storage, self.url, self.heartbeat = storage, url, heartbeat
        self._slots = threading.BoundedSemaphore(THREADS - RESERVED)
        self._guard = threading.Lock()
        self._local: dict[str, threading.Lock] = {}  # one waiter at a time takes the database lock
        self._claims: dict = {}

    def handler(self):
        grpc = _grpc()
        return grpc.method_handlers_generic_handler(SERVICE, {
            "Settings": grpc.unary_unary_rpc_method_handler(self.settings),
            "RecordHeartbeat": grpc.unary_unary_rpc_method_handler(self.record_heartbeat),
            "StaleTrialIds": grpc.unary_unary_rpc_method_handler(self.stale_trial_ids),
            "HoldClaim": grpc.stream_stream_rpc_method_handler(self.hold_claim),
        })

    def settings(self, request: bytes, context) -> bytes:
        return json.dumps({"heartbeat_interval": self.heartbeat["heartbeat_interval"],
                           "grace_period": self.heartbeat["grace_period"]}).encode()

    def record_heartbeat(self, request: bytes, context) -> bytes:
        self.storage.record_heartbeat(int(request))
        return b""

    def stale_trial_ids(self, request: bytes, context) -> bytes:
        return json.dumps(stale_trial_ids(self.storage, int(request))).encode()

    def _locks_of(self, study: str):

        with self._guard:
            if study not in self._local:
                self._local[study] = threading.Lock()
                self._claims[study] = ClaimLock(self.url, study)  # a database connection only while held
            return self._local[study], self._claims[study]

    def hold_claim(self, requests, context):
        study = next(requests, b"").decode(errors="replace")
        if not STUDY_NAME.fullmatch(study):
            context.abort(_grpc().StatusCode.INVALID_ARGUMENT, f"not a study name: {study!r}")
        if not self._slots.acquire(blocking=False):
            yield BUSY
            return
        try:
            local, lock = self._locks_of(study)
            while not local.acquire(timeout=0.5):
                if not context.is_active():  # the waiting worker is gone
                    return
            try:
                lock.acquire()
                try:
                    yield GRANTED
                    for _ in requests:  # until the worker releases (ends its requests) or dies (the call breaks)
                        pass
                finally:
                    lock.release()
            finally:
                local.release()
        finally:
            self._slots.release()


def serve(url: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT, ready=print) -> None:
    """`tuner proxy`: serve the database at url on host:port (0: a free port) until Ctrl-C or SIGTERM."""
    url = StorageURL(url)
    if url.is_proxy or url.path is not None:
        raise UserError(f"--storage {url}: the proxy stands in front of a database server, e.g. "
                        "postgresql+psycopg://user:pw@db-host:5432/db (one machine needs no proxy: journal:///FILE.log)")
    if not 0 <= port < 65536:
        raise UserError(f"--port {port}: give a port from 1 to 65535 (0: any free port)")
    grpc = _grpc()
    try:  # what optuna.storages.run_grpc_proxy_server serves, on a server of ours (one port, no SO_REUSEPORT)
        add_StorageServiceServicer_to_server, OptunaStorageProxyService = grpc_proxy_service()
    except ImportError as exc:
        raise UserError(f"Optuna's gRPC storage proxy cannot be loaded ({exc}); it needs optuna>=4.2 and {PIP_HINT}") from None
    _check_port(host, port)
    rdb = open_storage(url)  # heartbeats as for every database server (TUNER_HEARTBEAT_INTERVAL, TUNER_GRACE_PERIOD)
    heartbeat = {"heartbeat_interval": rdb.heartbeat_interval, "grace_period": rdb.grace_period}
    storage = optuna.storages.get_storage(rdb)  # Optuna's advice for the proxy: its in-process cache of finished trials
    pool = ThreadPoolExecutor(max_workers=THREADS)
    # SO_REUSEPORT off: a second proxy on a taken port fails here instead of sharing the port with the first
    server = grpc.server(pool, options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", -1)])
    add_StorageServiceServicer_to_server(OptunaStorageProxyService(storage), server)
    server.add_generic_rpc_handlers((TunerProxyService(storage, url, heartbeat).handler(),))
    try:
        port = server.add_insecure_port(_target(host, port))
    except RuntimeError as exc:  # grpc: "Failed to bind to address ..."
        rdb.engine.dispose()
        raise UserError(f"--host {host} --port {port}: cannot listen there ({_first_line(exc)}); "
                        "is the port taken (another proxy)?") from None
    server.start()
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    ready(f"tuner proxy: workers connect with --storage {GRPC_PREFIX}{_target(shown, port)} (serving the database at "
          f"{_server_of(url)}; heartbeat {heartbeat['heartbeat_interval']} s, grace {heartbeat['grace_period']} s; "
          "Ctrl-C stops)")
    sys.stdout.flush()
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (tuner.errors.Terminated)
        pass
    finally:
        server.stop(grace=2).wait()
        pool.shutdown(wait=False)
        rdb.engine.dispose()


def _check_port(host: str, port: int) -> None:
    """A taken port is one line here (gRPC would also log its own error line)."""
    if port == 0:
        return
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            s.bind(addr)
    except OSError as exc:
        hint = "is the port taken (another proxy)?" if exc.errno == errno.EADDRINUSE else "give an address of this host"
        raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc}); {hint}") from None


def _server_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 'default port'}"
