"""Add-ons (such as `ondevice.pairs`) plug into the core through entry points, so the core never imports them.

Two groups, declared in an add-on's package metadata (pyproject.toml `[project.entry-points."..."]`):

- `ondevice.bundle_parts`: NAME = a callable `(bundle, threads) -> scorer` for an optional part of a bundle
  (`pair_head`, `dipair`); `Bundle.part(NAME)` loads it on first use.
- `ondevice.commands`: NAME = a module with HELP, add_arguments(parser) and run(args), like `ondevice/cli/*.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from ondevice.errors import OndeviceError

PARTS = "ondevice.bundle_parts"
COMMANDS = "ondevice.commands"


def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of `group` by name."""
    return {ep.name: ep for ep in metadata.entry_points(group=group)}


def load(group: str, name: str) -> Any:
    """The object an add-on registered as `name` in `group`; one line naming the fix when none did."""
    ep = entry_points(group).get(name)
    if ep is None:
        raise OndeviceError(f"'{name}' is provided by an add-on that is not installed (no entry point in {group}); "
                            "reinstall ondevice (pip install -e . in a checkout) so its add-ons register")
    return ep.load()


def part_factory(name: str) -> Callable[..., Any]:
    """The factory of a bundle part: `part_factory("pair_head")(bundle, threads)`."""
    return load(PARTS, name)
