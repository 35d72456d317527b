import pytest

from xdex.atomic import atomic_path, atomic_write_text


def test_replaces_only_on_success(tmp_path):
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    atomic_write_text(target, "new")
    assert target.read_text() == "new"


def test_new_files_get_the_usual_permissions(tmp_path):
    import os

    mask = os.umask(0)
    os.umask(mask)
    atomic_write_text(tmp_path / "g.txt", "x")
    assert (tmp_path / "g.txt").stat().st_mode & 0o777 == 0o666 & ~mask
