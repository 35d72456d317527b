"""Problems are listed by file, then line, and a badly broken file is listed only up to a bound."""

from __future__ import annotations

from xdex.data import ProblemLog, validate


def test_ordered_by_file_then_line():
    log = ProblemLog()
    log.add("b.txt", None, "the file is empty")
    log.add("a.txt", 7, "seven")
    log.add("b.txt", 3, "three")
    log.add("a.txt", 2, "two")
    log.add("a.txt", None, "reported after the lines")
    assert [str(p) for p in log.ordered()] == [
        "b.txt: the file is empty",
        "b.txt:3: three",
        "a.txt:2: two",
        "a.txt:7: seven",
        "a.txt: reported after the lines",
    ]


def test_listing_stops_after_the_bound(make_folder):
    folder = make_folder({"labels.jsonl": '{"text": "A"}\n', "train.jsonl": '{"text": "x", "labels": [3]}\n' * 150})
    problems = validate(folder)
    assert len(problems) == 101
    assert [p.line for p in problems[:100]] == list(range(1, 101))
    assert str(problems[-1]) == f"{folder / 'train.jsonl'}: more than 100 problems; stopped listing"
