"""A whole training run at scale: the `unidec` recipe on 100,000 documents and 100,000 labels against the goal of
10 minutes on 2 cores.

    python -m benchmarks.bench_train_scale [--documents 100000] [--method unidec] [--kinds auto exact]
        [--set key=value ...] [--update-docs]

``xdex.data.synthetic.memorisation_task(n=--documents)`` (n documents and n labels of 16 random words) trained by
``xdex.methods.pipeline.train`` with the packaged recipe and the --set overrides, once per hard-negative search
(``sampling.mining_index.kind``, each of --kinds), each run in a process of its own, one after the other;
``OMP_NUM_THREADS`` is left unset, as a user leaves it. Reported: wall seconds from the texts to the written model
(tokenizer, training with validation, the ranking stage, the label index), the epochs' own seconds (the trainer's
log: steps, refreshes and validations), the epochs that start with a refresh, and peak memory. The memorisation
task's validation documents have labels no training document has, so the run measures time only.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import (
    add_isolation_args,
    command_line,
    goals_line,
    load_average,
    machine_line,
    peak_rss_mb,
    publish,
    run_isolated,
    training_history,
    write_result,
)

log = logging.getLogger("bench_train_scale")

GOAL_S = 600.0
TITLE = "## Training at scale: one run from the texts to the model"


class SearchNames(logging.Handler):
    """Which search each refresh's hard-negative mining used, from the objective's log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.kinds: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r"\((\w+) search\)$", record.getMessage())
        if found:
            self.kinds.append(found.group(1))


def run_one(job: dict) -> dict:
    """Train the recipe on the synthetic task in a temporary folder; times, refresh epochs, the searches used and
    peak memory."""
    from xdex.data.synthetic import memorisation_task
    from xdex.methods.pipeline import train
    from xdex.methods.recipe import load_recipe

    overrides = [*job["overrides"], f"sampling.mining_index.kind={job['kind']}", "trainer.progress=false"]
    config = load_recipe(job["method"], overrides=overrides)
    data = memorisation_task(n=job["documents"])
    load = [load_average()]
    searches = SearchNames()
    objective_log = logging.getLogger("xdex.methods.objective")
    level = objective_log.level
    objective_log.addHandler(searches)
    objective_log.setLevel(logging.INFO)  # its refreshes name their search at INFO
    try:
        with tempfile.TemporaryDirectory(prefix="bench-train-scale-") as tmp:
            start = time.perf_counter()
            train(data, config, Path(tmp) / "model")
            total = time.perf_counter() - start
            history = training_history(Path(tmp) / "model")
    finally:
        objective_log.removeHandler(searches)
        objective_log.setLevel(level)
    load.append(load_average())
    sampling = config.sampling
    refreshes = [e for e in range(len(history))
                 if e >= sampling.first_refresh and (e - sampling.first_refresh) % sampling.refresh_every == 0]
    epoch_s = [float(r["seconds"]) for r in history]
    return {"total_s": total, "epoch_s": epoch_s, "refresh_epochs": refreshes, "peak_mb": peak_rss_mb(),
            "load": load, "searches": searches.kinds}


def section(args: argparse.Namespace, records: dict[str, dict], argv: list[str]) -> str:
    loads = [x for r in records.values() for x in r["load"]]
    lines = [
        TITLE, "",
        f"`{command_line('benchmarks.bench_train_scale', argv)}`", "",
        machine_line((loads[0], loads[-1]), torch_note=", OMP_NUM_THREADS not set") + ".",
        f"The packaged `{args.method}` recipe (overrides: {', '.join(args.set) or 'none'}) on "
        f"`memorisation_task(n={args.documents:,})` ({args.documents:,} documents and labels), trained by "
        "`xdex.methods.pipeline.train` from the texts to the "
        "written model, once per hard-negative search, one run after the other, each in a process of its own. "
        "epochs s: the trainer's own seconds of all epochs (steps, refreshes, validations); refresh epochs: those "
        "that start with a refresh (query clusters and hard-negative mining), each; searched by: the search the "
        f"refreshes' mining used. Goal: at most {GOAL_S:.0f} s.", "",
        "| mining | searched by | total s | epochs s | refresh epochs s, each | other epochs s, median | peak MB |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for kind, r in records.items():
        refresh = [r["epoch_s"][e] for e in r["refresh_epochs"]]
        other = sorted(s for e, s in enumerate(r["epoch_s"]) if e not in r["refresh_epochs"])
        median_other = other[len(other) // 2] if other else float("nan")
        searched = ", ".join(sorted(set(r["searches"]))) or "no search"
        lines.append(f"| {kind} | {searched} | {r['total_s']:,.0f} | {sum(r['epoch_s']):,.0f} | "
                     f"{', '.join(f'{s:.0f}' for s in refresh)} | {median_other:.1f} | {r['peak_mb']:,.0f} |")
    lines += ["", goals_line([(f"{kind} mining, at most {GOAL_S:.0f} s from the texts to the model",
                               f"{r['total_s']:,.0f} s", r["total_s"] <= GOAL_S) for kind, r in records.items()])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--method", default="unidec")
    parser.add_argument("--kinds", nargs="+", default=["auto", "exact"], choices=["auto", "exact", "hnsw"])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--update-docs", action="store_true")
    add_isolation_args(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.one:
        write_result(args.result, run_one(json.loads(args.one)))
        return
    records = {}
    for kind in args.kinds:
        job = {"kind": kind, "documents": args.documents, "method": args.method, "overrides": args.set}
        records[kind] = run_isolated("benchmarks.bench_train_scale", job)
        log.info("%s: %s", kind, json.dumps(records[kind]))
    publish(section(args, records, [a for a in argv if a != "--update-docs"]), args.update_docs)


if __name__ == "__main__":
    main()
