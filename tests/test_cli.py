"""The `ondevice` command itself: every subcommand takes --seed, the seed reaches the global generators, and --help
shows every option's default."""

from __future__ import annotations

import argparse
import random

import numpy as np
import pytest

from ondevice.cli import _commands, build_parser, main, seed_globals
from ondevice.index import HammingIndex


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


LEAVES = [(" ".join(path), p) for path, p in _leaves(build_parser())]


def test_the_walk_sees_every_command_and_step():
    names = {name for name, _ in LEAVES}
    assert {name.split()[0] for name in names} == set(_commands())  # nothing missed at the top level
    assert {"index build", "index search", "index serve", "index info", "pairs data", "pairs eval", "pairs soup",
            "pairs dipair", "distill", "binarize"} <= names


@pytest.mark.parametrize("name,parser", LEAVES, ids=[name for name, _ in LEAVES])
def test_every_command_takes_seed(name, parser):
    (action,) = [a for a in parser._actions if "--seed" in a.option_strings]
    assert action.type is int and isinstance(action.default, int), name


@pytest.mark.parametrize("name,parser", LEAVES, ids=[name for name, _ in LEAVES])
def test_help_shows_every_real_default_once(name, parser):
    text = parser.format_help()
    assert "(default: )" not in text and "(default: None)" not in text, name
    for action in parser._actions:
        if not action.option_strings or action.default in (None, "", argparse.SUPPRESS) or action.default is False:
            continue
        shown = parser._get_formatter()._expand_help(action) if action.help else ""
        assert shown.count("default") >= 1, f"{name} {action.option_strings[0]}: default {action.default!r} not shown"
        assert shown.count("(default: ") <= 1, f"{name} {action.option_strings[0]}: default shown twice"


def test_seed_globals_makes_the_global_generators_repeat():
    seed_globals(7)
    first = (random.random(), np.random.random(3))
    random.random(), np.random.random(5)
    seed_globals(7)
    again = (random.random(), np.random.random(3))
    assert first[0] == again[0] and np.array_equal(first[1], again[1])
    seed_globals(2**40)  # a seed beyond numpy's 32-bit legacy range is folded, not refused
    big = np.random.random()
    seed_globals(2**40)
    assert np.random.random() == big


def test_main_seeds_the_globals_of_a_command_without_its_own_randomness(tmp_path, capsys):
    index = HammingIndex(64)
    index.add(np.arange(8 * 5, dtype=np.uint8).reshape(5, 8))
    path = index.save(tmp_path / "a.odx")
    for seed in (3, 4):
        assert main(["index", "info", str(path), "--seed", str(seed)]) == 0
        drawn = np.random.random()
        seed_globals(seed)
        assert drawn == np.random.random()
    assert "codes" in capsys.readouterr().out


def test_a_closed_pipe_ends_quietly():
    """`ondevice ... | head` closes stdout early: no traceback, exit 141 like other tools killed by SIGPIPE."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "ondevice", "info", "pretrained", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before it writes anything: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
