"""Threads per loader worker: each worker decodes on its share of the cores (DATA.DECODE_THREADS
0), never one FFmpeg thread per core in every worker, and runs torch and OpenCV on one thread."""

import logging

import pytest
import torch
from torch.utils.data import Dataset
from videos_for_tests import ramp_frames, write

from zoo.config import ConfigError, get_cfg, validate_config
from zoo.data import DATASET_REGISTRY, build, workers
from zoo.data.decode import threads as T
from zoo.data.decode.registry import PyAVReader


@pytest.fixture(autouse=True)
def _main_process_threads(monkeypatch):
    import cv2

    monkeypatch.setenv("OPENCV_FOR_THREADS_NUM", "0")  # restored (or removed) afterwards
    monkeypatch.delenv("OPENCV_FOR_THREADS_NUM")
    threads = cv2.getNumThreads()
    yield
    T.set_auto_threads(None)  # as in a process that is no loader worker
    cv2.setNumThreads(threads)


def test_each_worker_gets_its_share_of_the_cores():
    assert T.threads_per_worker(14, cores=16) == 1  # the 16-core GPU host, 14 workers
    assert T.threads_per_worker(2, cores=16) == 8
    assert T.threads_per_worker(3, cores=2) == 1  # never 0
    assert T.threads_per_worker(0, cores=4) == 4  # no workers: the main process decodes
    assert T.decoder_threads(3) == 3
    assert T.decoder_threads(T.LIBRARY_CHOICE) == 0  # FFmpeg picks (one per core)
    T.set_auto_threads(2)
    assert T.decoder_threads(0) == 2 == T.auto_threads()
    T.set_auto_threads(None)
    assert T.decoder_threads(0) == T.auto_threads() >= 1


def test_pyav_decodes_on_the_share_it_is_given(tmp_path):
    big = write(str(tmp_path / "big.mp4"), ramp_frames(8, 256, 320))  # 256x256 and more
    small = write(str(tmp_path / "small.mp4"), ramp_frames(8))
    for share, expected in ((3, 3), (1, 1)):
        T.set_auto_threads(share)
        with PyAVReader(big) as video:
            assert video._stream.codec_context.thread_count == expected
            assert video._scale_threads == expected
            frames = video.decode([0, 5]).numpy()
        assert frames.shape == (2, 256, 320, 3)
    T.set_auto_threads(4)
    with PyAVReader(small) as video:  # small frames: one thread whatever the share
        assert video._stream.codec_context.thread_count == 1
    with PyAVReader(big, threads=2) as video:  # DECODE_THREADS > 0: as given
        assert video._stream.codec_context.thread_count == 2
    with PyAVReader(big, threads=T.LIBRARY_CHOICE) as video:  # -1: FFmpeg's own count
        assert video._stream.codec_context.thread_count == 0
        assert video._stream.thread_type != "NONE" and video._scale_threads == 0


class _ReportThreads(Dataset):
    """Items whose label is what the worker making them sees: its decoder share, torch threads
    and OpenCV threads."""

    def __init__(self, **kwargs):
        self.num_classes_found = 1

    def __len__(self):
        return 4

    def __getitem__(self, item):
        import cv2

        seen = T.auto_threads() * 10000 + torch.get_num_threads() * 100 + cv2.getNumThreads()
        return torch.zeros(3, 2, 4, 4), seen, item[1], 0


DATASET_REGISTRY.register(_ReportThreads, name="ReportThreadsForTests")


def _loader_cfg(tmp_path, decode_threads):
    anno = tmp_path / "list.txt"
    anno.write_text("a 1 0\n")
    cfg = get_cfg()
    cfg.defrost()
    data = cfg.CONFIG.DATA
    data.DATASET, data.TRAIN_ANNO_PATH, data.NUM_WORKERS = "ReportThreadsForTests", str(anno), 2
    data.DECODE_THREADS, data.NUM_CLASSES = decode_threads, 1
    cfg.CONFIG.TRAIN.BATCH_SIZE = 2
    return cfg


def test_the_loader_workers_use_their_share_and_say_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(workers, "available_cpus", lambda: 8)  # 2 workers on 8 cores: 4 each
    with caplog.at_level(logging.INFO, logger="zoo.data.build"):
        loader = build.build_loader(_loader_cfg(tmp_path, 0), "train")
    assert ("train loader: 2 workers on 8 cores, each with 4 decoder thread(s) "
            "(DATA.DECODE_THREADS 0), 1 torch and 1 OpenCV thread(s)") in caplog.text
    loader.sampler.set_epoch(0)
    seen = {int(v) for batch in loader for v in batch[1]}
    assert seen == {4 * 10000 + 1 * 100 + 1}
    assert T.auto_threads() != 4 or workers.available_cpus() == 4  # the main process is untouched
    del loader

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zoo.data.build"):
        build.build_loader(_loader_cfg(tmp_path, T.LIBRARY_CHOICE), "train")
    assert ("each with FFmpeg's choice (one per core) decoder thread(s) (DATA.DECODE_THREADS -1), "
            "1 torch and OpenCV's default OpenCV thread(s)") in caplog.text


def test_decode_threads_below_minus_one_is_refused():
    cfg = get_cfg()
    cfg.defrost()
    cfg.CONFIG.DATA.DECODE_THREADS = -2
    with pytest.raises(ConfigError, match="CONFIG.DATA.DECODE_THREADS"):
        validate_config(cfg)
