"""Run ``dse`` in-process for tests: exit code, stdout and stderr."""

import pytest

from dse.cli import main


def run_cli(capsys, *argv):
    """``dse *argv`` in this process; returns (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
        raise SystemExit(0)
    cap = capsys.readouterr()
    return exc.value.code or 0, cap.out, cap.err
