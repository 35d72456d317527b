"""The benchmark harness: timing arithmetic, the data root, isolated runs, the machine line and publishing."""

import pytest
import torch
from benchmarks import harness
from torch import nn

from xdex.train import OptimConfig, TrainerConfig


def test_median_and_speedup_on_hand_made_times():
    assert harness.median([3.0, 1.0, 2.0]) == 2.0
    assert harness.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    # the reference's median is 6, the other's 2 (outliers do not move a median): 3 times faster
    assert harness.speedup([6.0, 5.0, 60.0], [2.0, 1.0, 3.0]) == 3.0
    assert harness.speedup([1.0], [4.0]) == 0.25


def test_repeat_times_n_calls_after_the_warmup():
    calls = []
    times = harness.repeat(lambda: calls.append(1), 3, warmup=2)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0 for t in times)
    assert harness.timed(divmod, 7, 2)[0] == (3, 1)


def test_data_root_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("XDEX_DATA_ROOT", str(tmp_path))
    assert harness.data_root() == tmp_path


def test_data_root_beside_the_repository_without_the_variable(monkeypatch):
    monkeypatch.delenv("XDEX_DATA_ROOT", raising=False)
    assert harness.data_root() == harness.REPO.parent / "shared" / "data"
    assert (harness.REPO / "benchmarks" / "harness.py").is_file()


def test_an_empty_variable_counts_as_unset(monkeypatch):
    monkeypatch.setenv("XDEX_DATA_ROOT", "")
    assert harness.data_root() == harness.REPO.parent / "shared" / "data"


def test_a_failed_isolated_run_raises_with_its_exit_code():
    with pytest.raises(harness.RunFailed, match="exit code 1"):
        harness.run_isolated("benchmarks.no_such_script", {"n": 1})


def test_machine_line_parts():
    line = harness.machine_line([1.25, 2.0], " with 1 thread")
    assert " CPU cores (" in line and ", Python 3." in line and ", torch " in line and " with 1 thread, " in line
    assert line.endswith("1-minute load average 1.2 at the start and 2.0 at the end")
    bare = harness.machine_line(torch_note=None)
    assert "torch" not in bare and "load" not in bare



def test_goals_line_puts_each_figure_beside_its_goal():
    line = harness.goals_line([("p50 ≤ 3 ms", "1.41 ms", True), ("≥ 1,000 requests/s", "950", False),
                               ("no errors", None, False)])
    assert line == ("Goals: p50 ≤ 3 ms: met (1.41 ms); ≥ 1,000 requests/s: NOT met (950); "
                    "no errors: not measured in this run.")

def test_command_line_as_the_docs_show_it():
    expected = "python -m benchmarks.bench_x --set 'a=b c'"
    assert harness.command_line("benchmarks.bench_x", ["--set", "a=b c"]) == expected
    assert harness.command_line("benchmarks.bench_x", [], prefix="X=1 ") == "X=1 python -m benchmarks.bench_x"


def test_publish_replaces_its_section_only(tmp_path, capsys):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## A\n\nold a\n\n## B\n\nb\n", encoding="utf-8")
    harness.publish("## A\n\nnew a\n", write=True, path=docs)
    assert docs.read_text(encoding="utf-8") == "# Benchmarks\n\n## A\n\nnew a\n\n## B\n\nb\n"
    harness.publish("## C\n\nc\n", write=False, path=docs)
    assert "## C" not in docs.read_text(encoding="utf-8") and "## C" in capsys.readouterr().out
    harness.publish("## C\n\nc\n", write=True, path=docs)
    assert docs.read_text(encoding="utf-8").endswith("## B\n\nb\n\n## C\n\nc\n")


class Regression:
    """y = 2x on four fixed points, a linear model without bias."""

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Linear(1, 1, bias=False)
        self.x = torch.tensor([[1.0], [2.0], [3.0], [4.0]])

    def loss(self, batch):
        return ((self.model(self.x[batch]).squeeze(-1) - 2 * self.x[batch].squeeze(-1)) ** 2).mean()


def test_step_trainer_runs_trainer_steps():
    objective = Regression()
    config = TrainerConfig(optim=OptimConfig(lr=0.5, warmup_ratio=0.0, schedule="constant"), device="cpu",
                           progress=False)
    trainer = harness.step_trainer(objective, config, total_steps=20)
    batch = torch.arange(4)
    before = float(objective.loss(batch).detach())
    losses = [harness.synchronised_step(trainer, batch) for _ in range(10)]
    assert losses[0] == pytest.approx(before)  # the loss of the batch before the update
    assert losses[-1] < losses[0] / 2
    assert trainer.schedulers[0].last_epoch == 10
