import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Token caches of the whole test session go to a temporary folder, not the user's ~/.cache/xdex."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDEX_CACHE_DIR", str(tmp_path_factory.mktemp("xdex-cache")))
    yield
    mp.undo()
