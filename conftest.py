"""The repository root's conftest: with it pytest puts the repository root on ``sys.path``, so tests import
the ``benchmarks`` package (``from benchmarks import bench_dexa``)."""
