"""The one exception type for user mistakes: the CLI prints its message as one line, no traceback."""


class OndeviceError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


class SettingError(OndeviceError, ValueError):
    """A bad environment setting read deep in a library call: a ValueError for API callers, one line for the CLI."""
