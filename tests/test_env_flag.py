"""One rule for tokenwire's boolean environment variables (tokenwire/_envflag.py): setup.py's build
switches (TOKENWIRE_DEBUG, ...) and the runtime's TOKENWIRE_LIST_ON_WIRE read every word alike --
1/true/yes/on, 0/false/no/off (any case, whitespace ignored), unset off, anything else an error
naming the variable and its value."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Union

import pytest

from tokenwire._envflag import FALSE_WORDS, TRUE_WORDS, env_flag
from support.wait import WAIT_S

ROOT = Path(__file__).resolve().parent.parent

#: Every word of the rule, other spellings of them, and words that are not booleans.
WORDS = sorted(TRUE_WORDS | FALSE_WORDS) + [
    "TRUE", "False", "Yes", "NO", "ON", "Off", " on ", "\toff\n", " ", "maybe", "2", "-1", "00",
    "y", "n", "t", "f", "enable", "disabled", "none", "null", "o n"]

Outcome = Union[bool, str]


def outcome(parse: Callable[[str], bool], name: str, word: str,
            monkeypatch: pytest.MonkeyPatch) -> Outcome:
    """True/False, or the ValueError's message."""
    monkeypatch.setenv(name, word)
    try:
        return parse(name)
    except ValueError as e:
        return str(e)


def setup_flag() -> Callable[[str], bool]:
    """setup.py's parser: the file run under another name than __main__ builds nothing."""
    flag: Callable[[str], bool] = runpy.run_path(str(ROOT / "setup.py"),
                                                 run_name="tokenwire_setup")["_flag"]
    return flag


def test_the_rule() -> None:
    assert TRUE_WORDS.isdisjoint(FALSE_WORDS)
    env = {"X": "Off"}
    assert env_flag("X", env) is False and env_flag("UNSET", env) is False
    assert env_flag("X", {"X": " YES "}) is True
    with pytest.raises(ValueError, match=r"^X='maybe' is not a boolean: use 1/true/yes/on or "
                                         r"0/false/no/off$"):
        env_flag("X", {"X": "maybe"})


def test_setup_py_reads_every_word_like_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    flag = setup_flag()
    for word in WORDS:
        assert (outcome(flag, "TOKENWIRE_DEBUG", word, monkeypatch)
                == outcome(env_flag, "TOKENWIRE_DEBUG", word, monkeypatch)), repr(word)
    # "off" must switch a build option off
    assert outcome(flag, "TOKENWIRE_NATIVE", "off", monkeypatch) is False
    monkeypatch.delenv("TOKENWIRE_NATIVE")
    assert flag("TOKENWIRE_NATIVE") is False


def test_setup_py_refuses_a_word_that_is_not_a_boolean() -> None:
    """A build with a mistyped switch stops, naming it (instead of building something else)."""
    pytest.importorskip("Cython")      # setup.py's build, which reads the switches, needs it
    r = subprocess.run([sys.executable, str(ROOT / "setup.py"), "--name"], cwd=ROOT,
                       env=dict(os.environ, TOKENWIRE_LINETRACE="ture"), capture_output=True,
                       text=True, timeout=WAIT_S)
    assert r.returncode != 0
    assert "TOKENWIRE_LINETRACE='ture' is not a boolean" in r.stderr


@pytest.mark.integration
@pytest.mark.parametrize("word", WORDS)
def test_the_runtime_reads_every_word_like_the_rule(word: str) -> None:
    """TOKENWIRE_LIST_ON_WIRE, read when tokenwire is imported (a fresh process per word)."""
    code = "import tokenwire; print(tokenwire.list_on_wire())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S,
                       cwd=tempfile.gettempdir(), env=dict(os.environ, TOKENWIRE_LIST_ON_WIRE=word))
    try:
        expected: Outcome = env_flag("TOKENWIRE_LIST_ON_WIRE", {"TOKENWIRE_LIST_ON_WIRE": word})
    except ValueError as e:
        assert r.returncode != 0 and str(e) in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(expected)
