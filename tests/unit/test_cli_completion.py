"""`groupcoord completion SHELL`: a script generated from the parser, so every command and flag completes."""

from __future__ import annotations

import subprocess
import sys


def _completions(script: str, words: list[str]) -> list[str]:
    """What bash offers for the last word of `words`, with the script loaded, as a user pressing Tab gets."""
    program = (
        f"source /dev/stdin; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
        f"_shtab_groupcoord groupcoord {words[-1]} {words[-2]}; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    done = subprocess.run(["bash", "-c", program], input=script, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_commands_actions_and_flags():
    made = subprocess.run(
        [sys.executable, "-m", "groupcoord", "completion", "bash"], capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    assert _completions(made.stdout, ["groupcoord", "off"]) == ["offsets"]
    assert _completions(made.stdout, ["groupcoord", "offsets", "re"]) == ["reset"]
    assert _completions(made.stdout, ["groupcoord", "offsets", "reset", "--to-e"]) == ["--to-earliest"]
    assert "describe" in _completions(made.stdout, ["groupcoord", "groups", ""])


def test_zsh_and_an_unknown_shell():
    zsh = subprocess.run([sys.executable, "-m", "groupcoord", "completion", "zsh"], capture_output=True, text=True)
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef groupcoord")
    fish = subprocess.run([sys.executable, "-m", "groupcoord", "completion", "fish"], capture_output=True, text=True)
    assert fish.returncode == 2 and "invalid choice" in fish.stderr
