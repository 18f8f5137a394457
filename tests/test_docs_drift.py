"""docs/validation.md's generated tables are what the code writes now (issue 27): the fast
blocks of `python benchmarks/validation_tables.py` (the physical model's tables, the b200
package check, the cost of a GPU-hour) are regenerated and compared with the committed file.
The slow blocks (the seed-paper reproductions, the wafer study, a serving run's cost) are
written by the same command with --write."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import validation_tables as vt  # noqa: E402


def test_committed_fast_tables_match_the_code(capsys):
    rc = vt.main(["--check"])
    assert rc == 0, capsys.readouterr().out


def test_every_block_has_its_markers():
    present = vt.blocks_in(vt.DOC.read_text())
    assert set(vt.BLOCKS) <= set(present), set(vt.BLOCKS) - set(present)


def test_replacing_a_block_keeps_the_rest():
    text = "a\n<!-- generated:x -->\nold\n<!-- /generated:x -->\nb\n"
    assert vt.replace_blocks(text, {"x": "new"}) == (
        "a\n<!-- generated:x -->\nnew\n<!-- /generated:x -->\nb\n")
    assert vt.blocks_in(vt.replace_blocks(text, {"x": "new"})) == {"x": "new"}
