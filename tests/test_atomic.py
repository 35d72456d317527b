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
