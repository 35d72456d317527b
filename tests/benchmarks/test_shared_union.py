"""The shared datasets put together: labels, documents and filter pairs in their places."""

import numpy as np
import scipy.sparse as sp
from benchmarks import shared_union
from benchmarks.shared_union import union

from xdex.data import Catalogue, Dataset, Split, load, save


def rows(pairs: list[list[int]], n_labels: int) -> sp.csr_matrix:
    data = [(r, c) for r, cols in enumerate(pairs) for c in cols]
    r, c = np.array(data, dtype=np.int64).reshape(-1, 2).T
    return sp.csr_matrix((np.ones(len(r), np.float32), (r, c)), shape=(len(pairs), n_labels))


def entries(text_of=lambda key: f"{key} is a thing") -> Dataset:
    """A same-universe dataset: documents are entries of the label catalogue, the test split's self-pairs filtered."""
    labels = Catalogue(["x", "y", "z"], ["x", "y", "z"], ["about x", "about y", "about z"])
    train = Split(["x", "y", "w"], [text_of(k) for k in "xyw"], rows([[1], [0, 2], [0]], 3))
    test = Split(["z"], [text_of("z")], rows([[0]], 3), filter=rows([[2]], 3))
    return Dataset("entries", train, labels, test)


def tags() -> Dataset:
    labels = Catalogue(["t1", "t2"], ["tag one", "tag two"])
    return Dataset("tags", Split(["p"], ["package p"], rows([[1]], 2)), labels,
                   Split(["q"], ["package q"], rows([[0, 1]], 2)))


def test_the_datasets_are_put_side_by_side_each_group_with_its_labels(tmp_path):
    save(entries(), tmp_path / "entries")
    save(entries(lambda key: key), tmp_path / "entries-titles")
    save(tags(), tmp_path / "tags")
    joined = union(tmp_path, {"e": ("entries", "entries-titles"), "t": ("tags",)})
    assert joined.labels.ids == ["e:x", "e:y", "e:z", "t:t1", "t:t2"]
    assert joined.labels.texts == ["x", "y", "z", "tag one", "tag two"]
    assert joined.train.ids == ["entries:x", "entries:y", "entries:w", "entries-titles:x", "entries-titles:y",
                                "entries-titles:w", "tags:p"]
    assert joined.train.texts[3:] == ["x", "y", "w", "package p"]
    assert joined.train.labels.toarray().astype(int).tolist() == [
        [0, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 0, 0, 0, 0],
        [0, 0, 0, 0, 1]]
    # the training documents' own entries, as xdex would find them in each dataset alone; none for the tags
    assert sorted(zip(*joined.train.filter.nonzero(), strict=True)) == [(0, 0), (1, 1), (3, 0), (4, 1)]
    assert joined.test is not None and joined.test.ids == ["entries:z", "entries-titles:z", "tags:q"]
    assert joined.test.labels.toarray().astype(int).tolist() == [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 1]]
    assert sorted(zip(*joined.test.filter.nonzero(), strict=True)) == [(0, 2), (1, 2)]


def test_the_folder_written_reads_back(tmp_path, capsys, monkeypatch):
    save(entries(), tmp_path / "data" / "entries")
    save(tags(), tmp_path / "data" / "tags")
    monkeypatch.setattr(shared_union, "GROUPS", {"e": ("entries",), "t": ("tags",)})
    shared_union.main([str(tmp_path / "out"), "--data-root", str(tmp_path / "data")])
    again = load(tmp_path / "out")
    assert (len(again.train), again.n_labels) == (4, 5)
    assert "4 training and 2 test documents, 5 labels" in capsys.readouterr().out
