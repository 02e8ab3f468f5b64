"""The default model's conversion cache under concurrent first use: two test workers (or two
engines) converting the same GGUF at once both end with the complete folder, and a half
folder in the way is an error, not silently kept."""

from __future__ import annotations

import pytest

from heatc_runtime.engines.models import _install


def _conversion(path, text: str):
    path.mkdir()
    (path / "config.json").write_text(text, encoding="utf-8")
    return path


def test_the_first_conversion_moves_into_place(tmp_path):
    staging = _conversion(tmp_path / ".tmp-a", "a")
    _install(staging, tmp_path / "model")
    assert (tmp_path / "model" / "config.json").read_text() == "a" and not staging.exists()


def test_a_conversion_another_process_finished_first_is_kept(tmp_path):
    target = _conversion(tmp_path / "model", "first")
    (target / "model.safetensors").write_bytes(b"x")  # a non-empty folder: rename(2) refuses it
    staging = _conversion(tmp_path / ".tmp-b", "second")
    _install(staging, target)
    assert (target / "config.json").read_text() == "first" and not staging.exists()


def test_a_half_folder_in_the_way_is_an_error(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "stray").write_text("left by something else", encoding="utf-8")
    staging = _conversion(tmp_path / ".tmp-c", "c")
    with pytest.raises(OSError):
        _install(staging, target)
