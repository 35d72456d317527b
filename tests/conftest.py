import pytest
from demo_models import train_dexml_on_demo


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Token caches of the whole test session go to a temporary folder, not the user's ~/.cache/xdex."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDEX_CACHE_DIR", str(tmp_path_factory.mktemp("xdex-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def dexml_on_demo(tmp_path_factory):
    """``(model, folder)``: :func:`demo_models.train_dexml_on_demo`, trained once for the tests that only read it."""
    out = tmp_path_factory.mktemp("dexml-demo") / "model"
    return train_dexml_on_demo(out), out
