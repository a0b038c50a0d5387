"""The worker's side of `tuner proxy` (tuner.run.proxy serves it): `--storage grpc://HOST:PORT` as an Optuna
storage with heartbeats, and the claim lock held through the proxy. grpcio is imported on first use only.
"""
from __future__ import annotations

import json
import random
import threading
import time
import warnings
from urllib.parse import urlsplit

import optuna

from ..errors import UserError
from .optuna_private import BaseHeartbeat

GRPC_PREFIX = "grpc://"  # a `tuner proxy` (tuner.run.proxy) in front of a database server

SERVICE = "engine_tuner.Proxy"
DEFAULT_PORT = 13000
THREADS = 256  # gRPC handler threads; each claim that waits or holds its lock takes one
RESERVED = 32  # threads never given to claims, so a claim's holder always gets its storage calls through
GRANTED, BUSY = b"granted", b"busy"
CONNECT_TIMEOUT_S = 10.0
PIP_HINT = 'pip install "engine-tuner[postgres]" (or: pip install grpcio protobuf)'


def _grpc():
    try:
        import grpc
    except ImportError:
        raise UserError(f"the gRPC proxy needs grpcio, which is not installed: {PIP_HINT}") from None
    return grpc


def parse_proxy_url(url: str, flag: str = "--storage") -> tuple[str, int]:
    """grpc://HOST:PORT -> (host, port); the port defaults to 13000."""
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        port = None
    if not url.startswith(GRPC_PREFIX) or not parts.hostname or port is None or parts.path not in ("", "/") \
            or parts.query or parts.username:
        raise UserError(f"{flag} {url}: a proxy URL is {GRPC_PREFIX}HOST:PORT, e.g. {GRPC_PREFIX}proxy-host:{DEFAULT_PORT}")
    return parts.hostname, port


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _first_line(exc) -> str:
    details = getattr(exc, "details", lambda: None)() or str(exc)
    return details.strip().splitlines()[0] if details.strip() else type(exc).__name__


# ---------------------------------------------------------------- losing the proxy


class ProxyLost(UserError):
    """The `tuner proxy` stopped answering in the middle of a command: one line and exit code 2 (as a database
    server that cannot be reached), no gRPC traceback."""


def _is_lost(exc) -> bool:
    """A call that failed because the proxy is gone, restarting or unreachable."""
    grpc = _grpc()
    code = getattr(exc, "code", None)
    return isinstance(exc, grpc.RpcError) and callable(code) and code() in (grpc.StatusCode.UNAVAILABLE,
                                                                            grpc.StatusCode.DEADLINE_EXCEEDED)


def lost_call(exc: BaseException):
    """The gRPC error of a lost proxy that exc is, or was raised while handling (Optuna's optimize, failing the
    trial after a lost call, loses its next call too and then raises an error of its own); else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _is_lost(exc):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def lost_proxy(url: str, exc, grace_period: int | None = None, running: bool = True) -> ProxyLost:
    """The one line for the lost call exc; running: a trial of this process may be RUNNING (else none is)."""
    first = _first_line(exc)
    reason = first.rsplit(": ", 1)[-1] if "failed to connect" in first else first  # e.g. "Connection refused"
    if running:
        grace = f" ({grace_period} s)" if grace_period else ""
        trial = (f"the trial it was running stays RUNNING until, with the proxy back, a claim finds it without "
                 f"heartbeat for the grace period{grace}, fails it and queues it again")
    else:
        trial = "no trial of this worker was running"
    return ProxyLost(f"lost the storage proxy at {_target(*parse_proxy_url(url))} ({reason}); {trial}; "
                     "start the worker again once the proxy is back")


class ProxyLossGuard:
    """`with ProxyLossGuard(url) as guard:` around a worker's storage work: with a grpc:// url, losing the proxy
    there ends the work with one line (ProxyLost) instead of gRPC's traceback; set guard.storage once the
    storage is open, for its grace period. Any other url or error passes through unchanged."""

    def __init__(self, url: str):
        self.url = url
        self.storage = None

    def __enter__(self) -> ProxyLossGuard:
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if not self.url.startswith(GRPC_PREFIX) or not isinstance(exc, Exception) or isinstance(exc, UserError):
            return False  # Ctrl-C and SIGTERM, the one-line errors, and every storage but the proxy: as they are
        call = lost_call(exc)
        if call is None:
            return False
        raise lost_proxy(self.url, call, getattr(self.storage, "grace_period", None)) from None


# ---------------------------------------------------------------- the workers' side


class ProxyStorage(optuna.storages.GrpcStorageProxy, BaseHeartbeat):
    """Optuna's gRPC client with the heartbeat calls of RDBStorage, carried out by the proxy. The interval and
    grace period are the proxy's; stale_trial_callback is the one of every database storage (storage.py)."""

    def __init__(self, *, host: str, port: int, heartbeat_interval: int, grace_period: int | None,
                 stale_trial_callback) -> None:
        super().__init__(host=host, port=port)
        self._heartbeat_interval = heartbeat_interval
        self.grace_period = grace_period
        self._stale_trial_callback = stale_trial_callback

    def _call(self, method: str, payload: bytes) -> bytes:
        return self._channel.unary_unary(f"/{SERVICE}/{method}")(payload, timeout=60)

    def record_heartbeat(self, trial_id: int) -> None:
        grpc = _grpc()
        try:
            self._call("RecordHeartbeat", str(trial_id).encode())
        except grpc.RpcError as exc:  # the proxy restarting: beat again next interval (an exception ends Optuna's thread)
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return json.loads(self._call("StaleTrialIds", str(study_id).encode()))

    def get_heartbeat_interval(self) -> int | None:
        return self._heartbeat_interval

    def get_heartbeat_stale_trial_callback(self):
        return self._stale_trial_callback


def open_proxy(url: str, flag: str = "--storage", *, stale_trial_callback) -> ProxyStorage:
    """A storage through the `tuner proxy` at url, or a one-line UserError. Writes nothing. stale_trial_callback:
    what fail_stale_trials does with a dead worker's trial (storage.stale_trial_callback)."""
    host, port = parse_proxy_url(url, flag)
    grpc = _grpc()
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # the proxy is "experimental"
    where = _target(host, port)
    with grpc.insecure_channel(where) as channel:
        try:
            settings = json.loads(channel.unary_unary(f"/{SERVICE}/Settings")(b"", timeout=CONNECT_TIMEOUT_S))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise UserError(f"{flag} {url}: the gRPC server at {where} is not a `tuner proxy` (Optuna's own proxy has "
                                "no heartbeats and no claim lock: a dead worker's trial would stay RUNNING); start "
                                "`tuner proxy --storage postgresql+psycopg://...` there") from None
            raise UserError(f"{flag} {url}: no tuner proxy answers at {where} ({_first_line(exc)}); start one with "
                            "`tuner proxy --storage postgresql+psycopg://...` and check the host and port") from None
    return ProxyStorage(host=host, port=port, heartbeat_interval=settings["heartbeat_interval"],
                        grace_period=settings.get("grace_period"), stale_trial_callback=stale_trial_callback)


class ProxyClaimLock:
    """tuner.run.claims.ClaimLock through the proxy: held while this stream is open; the proxy holds the
    database lock for it, and lets go when the stream ends (release) or breaks (this process died)."""

    def __init__(self, url: str, study_name: str):
        self.url, self.study_name = url, study_name
        self.kind = "proxy"
        self.held = False
        self._channel = self._call = self._done = None

    def acquire(self) -> None:
        if self.held:
            return
        grpc = _grpc()
        host, port = parse_proxy_url(self.url)
        if self._channel is None:
            self._channel = grpc.insecure_channel(_target(host, port))
        hold = self._channel.stream_stream(f"/{SERVICE}/HoldClaim")
        while True:
            done = threading.Event()

            def requests(done=done):
                yield self.study_name.encode()
                done.wait()  # the end of the requests is the release

            call = hold(requests())
            try:
                reply = next(call)
            except (grpc.RpcError, StopIteration) as exc:
                done.set()
                if _is_lost(exc):  # between trials: none of this worker's is running
                    raise lost_proxy(self.url, exc, running=False) from None
                raise UserError(f"--storage {self.url}: the proxy at {_target(host, port)} did not grant the claim lock "
                                f"({_first_line(exc)}); is `tuner proxy` still running?") from None
            if reply == GRANTED:
                break
            done.set()  # busy: every claim slot of the proxy is taken; ask again shortly
            call.cancel()
            time.sleep(random.uniform(0.05, 0.25))
        self._call, self._done, self.held = call, done, True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        grpc = _grpc()
        self._done.set()
        try:
            for _ in self._call:  # the proxy ends the stream once the database lock is released
                pass
        except grpc.RpcError:
            pass  # the proxy is gone, and with it its database session and the lock
        self._call = self._done = None

    def close(self) -> None:
        self.release()
        if self._channel is not None:
            self._channel.close()
            self._channel = None


# ---------------------------------------------------------------- the proxy's side


