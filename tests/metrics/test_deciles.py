import numpy as np
import pytest
import scipy.sparse as sp

from xdex.metrics import Ranking, compute_metrics, decile_contributions, label_bins, plot_deciles


def train_with_counts(counts):
    """A training matrix where label l has counts[l] documents (one label per document)."""
    cols = np.repeat(np.arange(len(counts)), counts)
    return sp.csr_matrix((np.ones(len(cols)), cols, np.arange(len(cols) + 1)), shape=(len(cols), len(counts)))


def test_volume_bins_by_hand():
    # counts 6, 1, 3, 2 (total 12), sorted: label 0 (6), 2 (3), 3 (2), 1 (1)
    # pairs before each label: 0, 6, 9, 11 -> bin = before * 4 // 12 = 0, 2, 3, 3
    bins = label_bins(train_with_counts([6, 1, 3, 2]), n_bins=4, by="volume")
    assert bins.tolist() == [0, 3, 2, 3]


def test_count_bins_by_hand_and_ties_by_lower_id():
    # counts 2, 5, 2, 0: order 1, 0, 2, 3 (0 before 2 on the tie) -> rank * 2 // 4 = 0, 0, 1, 1
    bins = label_bins(train_with_counts([2, 5, 2, 0]), n_bins=2, by="count")
    assert bins.tolist() == [0, 0, 1, 1]


def test_labels_without_training_documents_go_to_the_last_bin():
    bins = label_bins(train_with_counts([4, 0, 4]), n_bins=3, by="volume")
    # before: label 0 -> 0, label 2 -> 4, label 1 -> 8; bins 0, 4*3//8 = 1, min(8*3//8, 2) = 2
    assert bins.tolist() == [0, 2, 1]


def test_contributions_add_up_to_precision():
    train = train_with_counts([6, 1, 3, 2])  # volume bins with n_bins=4: [0, 3, 2, 3]
    truth = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 1]]))
    ranking = Ranking.from_lists([[1, 2], [3, 2]], [[0.9, 0.8], [0.7, 0.6]])
    report = decile_contributions(ranking, truth, train, k=2, n_bins=4)
    # hits: doc0 label 1 (bin 3); doc1 labels 3 (bin 3) and 2 (bin 2) -> over N*k = 4 positions
    assert report.contributions.tolist() == pytest.approx([0.0, 0.0, 25.0, 50.0])
    assert report.precision == pytest.approx(compute_metrics(ranking, truth, ks=[2])["P@2"])
    assert report.labels_per_bin.tolist() == [1, 0, 1, 2]
    assert report.train_pairs_per_bin.tolist() == [6, 0, 3, 3]


def test_random_contributions_sum_to_precision():
    rng = np.random.default_rng(0)
    train = sp.csr_matrix((rng.random((200, 50)) < 0.1).astype(float))
    truth = sp.csr_matrix((rng.random((80, 50)) < 0.1).astype(float))
    ranking = Ranking(np.stack([rng.permutation(50)[:7] for _ in range(80)]), np.zeros((80, 7)))
    for by in ("volume", "count"):
        report = decile_contributions(ranking, truth, train, k=5, by=by)
        assert report.precision == pytest.approx(compute_metrics(ranking, truth, ks=[5])["P@5"])
        assert report.labels_per_bin.sum() == 50


def test_bad_arguments():
    with pytest.raises(ValueError, match="binning"):
        label_bins(train_with_counts([1]), by="size")
    with pytest.raises(ValueError, match="n_bins"):
        label_bins(train_with_counts([1]), n_bins=0)


def test_plot_is_written_atomically(tmp_path):
    train = train_with_counts([3, 2, 1])
    truth = sp.csr_matrix(np.array([[1, 0, 1]]))
    report = decile_contributions(Ranking.from_lists([[0, 2]], [[1.0, 0.5]]), truth, train, k=2, n_bins=3)
    target = tmp_path / "plots" / "deciles.png"
    plot_deciles(report, target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in target.parent.iterdir()] == ["deciles.png"]
