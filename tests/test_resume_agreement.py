"""Every rank of a multi-node job resumes from the same checkpoint or none: a node whose
LOG.BASE_PATH is not the folder rank 0 writes to stops the job with one line."""

import os

from helpers import on_two_gloo_ranks

from zoo.train.checkpoint import CheckpointError, agree_on_resume

# Each case: (rank 0's checkpoint file name or None, rank 1's), as find_resume_checkpoint gave.
_CASES = {
    "both_fresh": (None, None),
    "both_epoch_1": ("epoch_1.pth", "epoch_1.pth"),
    "node_local_folder": ("epoch_1.pth", None),
    "older_copy": ("epoch_2.pth", "epoch_1.pth"),
    "missing_on_rank_1": ("epoch_1.pth", "epoch_1.pth!missing"),
}


def _agree(rank):
    out = {}
    for case, names in _CASES.items():
        folder = os.path.join(os.environ["ZOO_TEST_RESUME_DIR"], case, f"node{rank}")
        os.makedirs(folder, exist_ok=True)
        name = names[rank]
        path = None
        if name is not None:
            path = os.path.join(folder, name.split("!")[0])
            if not name.endswith("!missing"):
                open(path, "wb").close()
        try:
            agree_on_resume(path, folder)
            out[case] = ""
        except CheckpointError as e:
            out[case] = str(e)
    return out


def test_ranks_that_would_resume_differently_stop(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_TEST_RESUME_DIR", str(tmp_path / "runs"))
    rank0, rank1 = on_two_gloo_ranks(_agree, tmp_path)
    assert rank0 == rank1  # both ranks stop, with the same line
    assert rank0["both_fresh"] == rank0["both_epoch_1"] == ""
    local = rank0["node_local_folder"]
    assert "rank 0 resumes from epoch_1.pth in" in local
    assert "rank 1 (on " in local and f"found no checkpoint in {tmp_path}" in local
    assert "CONFIG.LOG.BASE_PATH on a file system every node shares" in local
    assert "resumes from epoch_2.pth" in rank0["older_copy"]
    assert "resumes from epoch_1.pth in" in rank0["older_copy"]
    assert "epoch_1.pth (missing)" in rank0["missing_on_rank_1"]
