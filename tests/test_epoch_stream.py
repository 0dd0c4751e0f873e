"""One loader pass over many epochs (zoo/data/epoch_stream.py) serves exactly the batches of one
pass per epoch, also with a mid-epoch skip, epochs cut to whole accumulations, multigrid batches,
persistent workers and a pass given up for precise BN; and the checkpoint snapshot and background
writer (zoo/train/checkpoint_writer.py)."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

import pytest
import torch
from test_multigrid import _cfg, _Indices
from torch.utils.data import Dataset, DistributedSampler

from zoo.data.build import EpochSampler
from zoo.data.epoch_stream import EpochStream, set_loader_epoch
from zoo.data.multigrid import MultigridBatchSampler
from zoo.data.robust import GuardedLoader, TooManyBadVideos
from zoo.solver.multigrid import MultigridPlan
from zoo.train.checkpoint_writer import BackgroundWriter, Staging, snapshot


class Keys(Dataset):
    """Items that show which key made them: ``(tensor [epoch, index], label, index, n_bad)``;
    multigrid keys ``(epoch, index, frames, crop, ...)`` show their shape too. Videos in ``bad``
    count as unreadable."""

    def __init__(self, n: int, bad=()) -> None:
        self.n, self.bad = n, set(bad)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key):
        epoch, index = key[:2]
        return torch.tensor(list(key)), index % 3, index, int(index in self.bad)


def _loader(dataset, workers: int, ranks: int = 2, **kwargs) -> GuardedLoader:
    """A training loader as build_loader makes one: the last of ``ranks`` ranks, batches of 3."""
    sampler = EpochSampler(DistributedSampler(dataset, num_replicas=ranks, rank=ranks - 1,
                                              shuffle=True, seed=5, drop_last=False))
    return GuardedLoader(dataset, batch_size=3, sampler=sampler, drop_last=True,
                         num_workers=workers, persistent_workers=workers > 0, split="train",
                         **kwargs)


def _per_epoch(loader, first, end, skip, batches):
    """The batches of a pass per epoch, cut as the trainer cuts them."""
    out = []
    for epoch in range(first, end):
        s = skip if epoch == first else 0
        set_loader_epoch(loader, epoch, s)
        out.append([b[0] for b in loader][:batches(epoch) - s])
    return out


def _streamed(loader, first, end, skip, batches):
    stream = EpochStream.open(loader, first, end, skip, batches)
    assert stream is not None
    return [[b[0] for b in stream.epoch(epoch)] for epoch in range(first, end)]


def _same(a, b):
    assert [len(e) for e in a] == [len(e) for e in b]
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            assert torch.equal(u, v)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stream_serves_the_batches_of_a_pass_per_epoch(workers):
    # 29 videos: 15 per rank (one repeated: DistributedSampler's padding), 5 batches of 3. The
    # trainer trains 4 of them in odd epochs (a partial accumulation dropped) and skips 2 of the
    # first epoch's (a mid-epoch resume).
    batches = lambda e: 4 if e % 2 else 5  # noqa: E731
    want = _per_epoch(_loader(Keys(29), 0), 1, 5, 2, batches)
    got = _streamed(_loader(Keys(29), workers), 1, 5, 2, batches)
    _same(got, want)
    assert [len(e) for e in got] == [2, 5, 4, 5]
    assert [int(e[0][0, 0]) for e in got] == [1, 2, 3, 4]  # each epoch's own order


def test_a_multigrid_stream_serves_the_batches_of_a_pass_per_epoch():
    cfg = _cfg("long+short", MULTIGRID_LONG_CYCLE_FACTORS=[[0.5, 0.5 ** 0.5], [1.0, 1.0]])
    plan = MultigridPlan(cfg)

    def loader(workers):
        batches = MultigridBatchSampler(_Indices(120), plan, [256, 320])
        return GuardedLoader(Keys(120), batch_sampler=batches, num_workers=workers,
                             persistent_workers=workers > 0)

    sizes = loader(0).batch_sampler.batches_in_epoch
    batches = lambda e: sizes(e) - e % 2  # noqa: E731  (odd epochs drop their last batch)
    want = _per_epoch(loader(0), 0, plan.epochs, 3, batches)
    # With workers: a DataLoader makes two iterators of its batch sampler and uses the second.
    got = _streamed(loader(2), 0, plan.epochs, 3, batches)
    _same(got, want)
    assert len({tuple(b.shape) for e in got for b in e}) > 2  # the shapes change


def test_a_stopped_stream_leaves_the_loader_at_its_epoch_and_a_new_one_continues():
    loader = _loader(Keys(29), 2)
    whole = lambda e: 5  # noqa: E731
    stream = EpochStream.open(loader, 0, 4, 0, whole)
    first = [b[0] for b in stream.epoch(0)]
    stream.stop(0)  # precise BN: the epoch again, from its start, in a pass of its own
    with pytest.raises(RuntimeError, match="stopped"):
        stream.epoch(1)
    _same([[b[0] for b in loader]], [first])
    rest = _streamed(loader, 1, 4, 0, whole)
    _same(rest, _per_epoch(_loader(Keys(29), 0), 1, 4, 0, whole))


def test_the_bad_video_check_runs_at_the_end_of_each_epoch_of_a_stream():
    # 30 videos an epoch, a limit of 15%: 4 bad ones (13%) pass every epoch; 5 (17%) stop the
    # first epoch at its end, counted over that epoch alone.
    ok = _loader(Keys(30, bad={0, 1, 2, 3}), 0, ranks=1, max_bad_fraction=0.15)
    stream = EpochStream.open(ok, 0, 3, 0, lambda e: 10)
    for epoch in range(3):
        assert len(list(stream.epoch(epoch))) == 10
    bad = _loader(Keys(30, bad={0, 1, 2, 3, 4}), 0, ranks=1, max_bad_fraction=0.15)
    stream = EpochStream.open(bad, 0, 3, 0, lambda e: 10)
    with pytest.raises(TooManyBadVideos, match="5 of 30 train videos"):
        list(stream.epoch(0))


def test_a_loader_that_cannot_span_epochs_opens_no_stream():
    plain = torch.utils.data.DataLoader(list(range(6)), batch_size=2)
    assert EpochStream.open(plain, 0, 2, 0, lambda e: 3) is None
    assert EpochStream.open([1, 2], 0, 2, 0, lambda e: 1) is None


def _state():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    return model, {"model": model.state_dict(), "rng": [{"torch": [1, 2]}], "epoch": 3,
                   "pair": (torch.ones(2), "x"),
                   "w": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
                   "empty": torch.zeros(0, 3), "flag": torch.tensor([True, False])}


# staging: the tensors go through one reused host buffer, as a CUDA model's do ("cpu" here, so
# that the buffer's layout, strides and reuse are checked on any machine)
@pytest.mark.parametrize("staged", [False, True])
def test_a_snapshot_is_a_copy_training_cannot_change(staged):
    staging = Staging(devices=("cpu",)) if staged else None
    for _ in range(2):  # the second time through the same buffer
        model, state = _state()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        w = state["w"].clone()
        snap = snapshot(state, staging)
        with torch.no_grad():  # training goes on: the live tensors change in place
            for p in model.parameters():
                p.add_(1.0)
            model[1].running_mean.add_(1.0)
            state["w"].add_(1.0)
        state["rng"][0]["torch"].append(3)
        copy = snap.wait()
        assert copy["model"].keys() == before.keys()
        for key, value in copy["model"].items():
            assert torch.equal(value, before[key]), key
        assert copy["rng"] == [{"torch": [1, 2]}] and copy["epoch"] == 3
        assert isinstance(copy["model"], OrderedDict)
        assert copy["model"]._metadata == state["model"]._metadata  # what load_state_dict reads
        assert copy["pair"][1] == "x" and torch.equal(copy["pair"][0], torch.ones(2))
        assert torch.equal(copy["w"], w) and copy["w"].stride() == w.stride()
        assert copy["empty"].shape == (0, 3) and copy["flag"].tolist() == [True, False]
        # every tensor in storage of its own: torch.save writes nothing of another tensor's
        storages = [t.untyped_storage() for t in (copy["w"], *copy["model"].values())]
        assert all(s.nbytes() == t.numel() * t.element_size()
                   for s, t in zip(storages, (copy["w"], *copy["model"].values())))
    if staged:
        assert staging._buffer is not None and staging._buffer.numel() % 64 == 0


def test_a_written_snapshot_loads_as_the_state_it_copied(tmp_path):
    model, state = _state()
    torch.save(snapshot(state, Staging(devices=("cpu",))).wait(), tmp_path / "s.pth")
    loaded = torch.load(tmp_path / "s.pth", weights_only=True)
    for key, value in state["model"].items():
        assert torch.equal(loaded["model"][key], value)
    assert torch.equal(loaded["w"], state["w"]) and loaded["w"].stride() == state["w"].stride()
    # one storage per tensor: the file is the size of the tensors, not of the buffer
    size = sum(t.numel() * t.element_size() for t in (*state["model"].values(), state["w"]))
    assert (tmp_path / "s.pth").stat().st_size < size + 20_000


@pytest.mark.cuda
def test_a_cuda_snapshot_is_queued_behind_the_step_and_changes_nothing_after():
    """The copies are queued on the stream without waiting; a kernel queued after them (the next
    step's update) does not reach the snapshot."""
    device = torch.device("cuda")
    weights = torch.randn(4096, 4096, device=device)
    work = torch.randn(4096, 4096, device=device)
    for _ in range(8):  # the step still running when the snapshot is taken
        work = torch.tanh(work @ work)
    weights.add_(work.mean() * 0)  # the weights depend on that step
    want = weights.cpu()
    writes = BackgroundWriter()
    assert writes.reserve({"w": weights}) == weights.numel() * 4  # made ahead, pinned
    buffer = writes._staging._buffer
    assert buffer.is_pinned()
    snap = writes.snapshot({"w": weights, "n": 1})
    weights.add_(1.0)  # the next update, queued behind the copies
    got = snap.wait()
    assert torch.equal(got["w"], want) and got["n"] == 1
    again = writes.snapshot({"w": weights, "n": 2})  # the same staging buffer
    assert torch.equal(again.wait()["w"], want + 1.0)
    assert writes._staging._buffer is buffer


def test_the_background_writer_runs_one_write_at_a_time_and_raises_its_error_once(tmp_path):
    writes = BackgroundWriter()
    release = threading.Event()
    done = []

    def slow():
        release.wait(10)
        done.append("first")

    writes.submit(slow)
    assert writes.pending and not done
    release.set()
    writes.submit(lambda: done.append("second"))  # waits for the first
    assert done[0] == "first"
    writes.wait()
    assert done == ["first", "second"] and not writes.pending

    def fail():
        raise OSError(f"could not write {os.path.join(tmp_path, 'epoch_1.pth')}")

    writes.submit(fail)
    with pytest.raises(OSError, match="epoch_1.pth"):
        writes.wait()
    writes.wait()  # raised once
    writes.submit(fail)
    with pytest.raises(OSError):
        writes.submit(lambda: done.append("never"))  # the next save surfaces it too
    assert "never" not in done


def test_the_background_writer_returns_what_the_write_returned_however_early_it_ended():
    writes = BackgroundWriter()
    release = threading.Event()
    writes.submit(lambda: release.wait(10) and "epoch_1.pth")
    release.set()
    assert writes.wait() == "epoch_1.pth"  # waited for while in flight, or done by then
    writes.submit(lambda: "epoch_2.pth")
    writes._thread.join()  # the write ended before anyone waited
    assert writes.wait() == "epoch_2.pth"
    assert writes.wait() is None  # returned once


def test_polling_the_background_writer_never_blocks_and_raises_a_finished_write_error(tmp_path):
    writes = BackgroundWriter()
    release = threading.Event()
    writes.submit(lambda: release.wait(10))
    start = time.perf_counter()
    assert writes.poll() is True  # still in flight: poll returns at once
    assert time.perf_counter() - start < 1.0
    release.set()
    writes._thread.join()
    assert writes.poll() is False and not writes.pending

    def fail():
        raise OSError(f"could not write {os.path.join(tmp_path, 'epoch_2.pth')}")

    writes.submit(fail)
    writes._thread.join()
    with pytest.raises(OSError, match="epoch_2.pth"):
        writes.poll()
    assert writes.poll() is False  # raised once


def test_a_reserved_staging_buffer_serves_every_snapshot_that_fits():
    staging = Staging(devices=("cpu",))
    assert staging.reserve({"n": 1, "t": torch.ones(3, device="meta")}) == 0
    assert staging._buffer is None  # nothing on its devices: nothing made
    model, state = _state()
    nbytes = staging.reserve(state)
    buffer = staging._buffer
    assert nbytes > 0 and buffer.numel() == nbytes and nbytes % 64 == 0
    copy = snapshot(state, staging).wait()
    assert staging._buffer is buffer and torch.equal(copy["w"], state["w"])
    smaller = {"w": state["w"]}
    assert torch.equal(snapshot(smaller, staging).wait()["w"], state["w"])
    assert staging._buffer is buffer  # a smaller state takes a view of it
    larger = dict(state, extra=torch.zeros(nbytes))
    assert torch.equal(snapshot(larger, staging).wait()["extra"], larger["extra"])
    assert staging._buffer is not buffer and staging._buffer.numel() > nbytes  # outgrown
