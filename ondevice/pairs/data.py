"""Moved to `ondevice.eval.pair_tasks` (the core reads task splits too); this name stays importable."""

from ondevice.eval.pair_tasks import *
