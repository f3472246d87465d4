"""The one exception type for user mistakes: the CLI prints its message as one line, no traceback."""


class OndeviceError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class SettingError(OndeviceError, ValueError):
    """A bad environment setting read deep in a library call: a ValueError for API callers, one line for the CLI."""


def ort_error_line(exc: BaseException) -> str:
    """The first line of an onnxruntime error, without its status prefix, at most 200 characters."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first.split("Status Message:")[-1].strip()[:200]
