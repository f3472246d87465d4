"""Starting or joining Ray the same way everywhere (local: no dashboard, a bounded object store; cluster: by address)."""

from __future__ import annotations

import os
import shutil

from ondevice._deps import require
from ondevice.errors import OndeviceError

MIN_OBJECT_STORE_MB = 80  # Ray refuses a smaller object store


def ray_module():
    """The ray module, or a one-line error naming the extra to install."""
    return require("ray", "scale")


def _shm_free_mb() -> int:
    try:
        return int(shutil.disk_usage("/dev/shm").free // (1 << 20))
    except OSError:
        return 0


def object_store_mb(requested: int | None = None) -> int:
    """Object store size for a local Ray: the request, else 2 GiB, never more than 80% of free /dev/shm."""
    shm = _shm_free_mb()
    want = requested or 2048
    if shm and want > shm * 0.8:
        want = int(shm * 0.8)
    if want < MIN_OBJECT_STORE_MB:
        # A small /dev/shm (Docker's default is 64 MB) makes Ray fall back to slow disk or fail later; say so now.
        raise OndeviceError(f"/dev/shm has only {shm} MB free, too small for Ray's object store; start the container "
                            "with a larger /dev/shm (e.g. docker run --shm-size=2g) or join a cluster with --ray-address")
    return want


def init_ray(address: str | None = None, num_cpus: int | None = None, object_store: int | None = None) -> dict:
    """Join the cluster at `address`, else start a local Ray with `num_cpus` logical CPUs; returns cluster resources.

    A Ray that is already initialized in this process (a notebook, a test fixture) is used as it is.
    """
    ray = ray_module()
    if not ray.is_initialized():
        kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": True, "logging_level": "WARNING"}
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                # Ray renices its workers by +15: right beside other services, but on a machine shared with
                # other jobs the actors doing all the work would starve while the idle driver keeps its priority.
                os.environ.setdefault("RAY_worker_niceness", "0")
                ray.init(num_cpus=num_cpus or os.cpu_count() or 1, object_store_memory=object_store_mb(object_store) << 20,
                         **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            where = f"the Ray cluster at {address}" if address else "a local Ray"
            raise OndeviceError(f"cannot start or join {where}: {first}; check the address and that `ray start` runs "
                                "there with the same ray version") from None
    try:
        require("ray.data", "scale").DataContext.get_current().enable_progress_bars = False  # our own tqdm bar
    except AttributeError:
        pass
    return dict(ray.cluster_resources())


def error_line(exc: BaseException) -> str:
    """The most useful single line of a (possibly wrapped) Ray exception."""
    cause = exc
    while getattr(cause, "cause", None) is not None and cause.cause is not cause:
        cause = cause.cause
    text = str(cause).strip() or type(cause).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # a remote traceback ends with "SomeError: message"
        if "Error:" in ln or "Exception:" in ln:
            return ln
    return lines[-1] if lines else type(cause).__name__
