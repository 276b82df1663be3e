"""The warm-up's throwaway directories: a process killed in its warm-up (a broker SIGKILLed
as it starts) leaves its ``strata-warm-<pid>-*`` directory behind, and the next warm-up
removes it — only it: a directory whose process still runs, or whose name carries no pid,
stays."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap

from strata import warm

# a process that makes its warm-up directory (with a file in it) and is then SIGKILLed
_KILLED = textwrap.dedent("""
    import os, signal, sys
    from strata.warm import warm_directory
    with warm_directory() as d:
        (d / "store").mkdir()
        (d / "store" / "half-written").write_bytes(b"x" * 1000)
        print(d, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_killed_warm_ups_directory_is_removed_by_the_next_warm_up(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)       # TMPDIR read again
    killed = subprocess.run([sys.executable, "-c", _KILLED], capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == -9, killed.stderr
    left = tmp_path / killed.stdout.strip().rsplit("/", 1)[1]
    assert left.is_dir() and left.name.startswith("strata-warm-")
    running = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        live = tmp_path / f"strata-warm-{running.pid}-abc"       # its process runs
        live.mkdir()
        old_style = tmp_path / "strata-warm-k2j4x9"              # no pid: cannot tell
        old_style.mkdir()
        other = tmp_path / "unrelated-1-x"
        other.mkdir()
        with warm.warm_directory() as mine:
            assert mine.is_dir() and mine.parent == tmp_path
            assert not left.exists()
            assert warm.remove_stale(tmp_path) == []             # its own dir stays too
        assert not mine.exists()
        assert live.is_dir() and old_style.is_dir() and other.is_dir()
    finally:
        running.communicate(b"")
    assert warm.remove_stale(tmp_path) == [live]                # now its process is gone
