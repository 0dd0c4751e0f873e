"""The command lines: every [project.scripts] entry point resolves and answers --help, tools/ and
datasets/ hold thin wrappers around the same main(), one parser reads --extra-modules and
trailing KEY VALUE overrides alike in every command that takes a config, the README's commands
parse, and every command ends a bad input with one error: line and the common exit code. All in
this process (no interpreter per tool), but the import checks, which need a fresh one."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from zoo.cli.parser import ToolArgumentParser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPPERS = sorted(glob.glob(os.path.join(ROOT, "tools", "*.py"))
                  + glob.glob(os.path.join(ROOT, "datasets", "*.py")))


def _entry_points() -> dict:
    """``{command: "module:function"}`` read from pyproject.toml's [project.scripts] table
    (by hand, so the test needs no TOML reader on Python < 3.11)."""
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    table = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[)", text, re.S | re.M).group(1)
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.:]+)"', table, re.M))


ENTRY_POINTS = _entry_points()


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _load_wrapper(path: str):
    name = "wrapper_" + os.path.relpath(path, ROOT).replace(os.sep, "_")[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines main and returns
    return module


class Parsed(BaseException):
    """Raised in place of running the command, once its arguments are parsed (not an
    Exception, which every command's main reports as its error line instead)."""

    def __init__(self, namespace, rest):
        super().__init__("parsed")
        self.namespace, self.rest = namespace, rest


@pytest.fixture
def parse_only(monkeypatch):
    """``parse_only(main, argv)``: run ``main(argv)`` up to the end of its argument parsing and
    return ``(namespace, unrecognised arguments)``."""
    original = ToolArgumentParser.parse_known_args

    def stop(self, args=None, namespace=None):
        ns, rest = original(self, args, namespace)
        raise Parsed(ns, rest)

    monkeypatch.setattr(ToolArgumentParser, "parse_known_args", stop)

    def run(main, argv):
        with pytest.raises(Parsed) as e:
            main(argv)
        return e.value.namespace, e.value.rest

    return run


def test_entry_points_cover_every_wrapper():
    assert len(ENTRY_POINTS) >= 16 and all(k.startswith("zoo-") for k in ENTRY_POINTS)
    targets = set(ENTRY_POINTS.values())
    seen = set()
    for path in WRAPPERS:
        main = _load_wrapper(path).main
        target = f"{main.__module__}:{main.__name__}"
        assert target in targets, f"{path} calls {target}, which no entry point names"
        assert _resolve(target) is main
        seen.add(target)
    assert seen == targets  # and every entry point has its script under tools/ or datasets/


def test_scripts_have_no_sys_path_hacks_and_zoo_runs_no_script():
    for path in WRAPPERS:
        text = open(path, encoding="utf-8").read()
        assert "sys.path" not in text, path
        assert len(text.splitlines()) < 40, f"{path} is not a thin wrapper"
    for path in glob.glob(os.path.join(ROOT, "zoo", "**", "*.py"), recursive=True):
        text = open(path, encoding="utf-8").read()
        # A path built from the scripts' folders: os.path.join(root, "tools", ...).
        assert not re.search(r"""["'](tools|datasets)["']\s*,""", text), path


@pytest.mark.parametrize("command", sorted(ENTRY_POINTS))
def test_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        _resolve(ENTRY_POINTS[command])(["--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def test_zoo_test_help_names_the_checkpoint_it_tests_by_default(capsys):
    from zoo.cli.test import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "CONFIG.TEST.CHECKPOINT. Left empty (the default) it is the newest epoch_N.pth" in text
    assert "not best.pth" in text


# Each command that reads a config, with the arguments it needs besides the config's.
CONFIG_COMMANDS = {
    "zoo-train": [], "zoo-test": [], "zoo-doctor": [], "zoo-extract-features": [],
    "zoo-benchmark scaling": ["scaling"], "zoo-benchmark data": ["data"],
    "zoo-benchmark startup": ["startup"],
}


@pytest.mark.parametrize("command", sorted(CONFIG_COMMANDS))
@pytest.mark.parametrize("form", ["one flag", "repeated flag"])
def test_config_commands_share_the_parser(command, form, parse_only):
    main = _resolve(ENTRY_POINTS[command.split()[0]])
    modules = (["--extra-modules", "a.py", "my_pkg.models"] if form == "one flag" else
               ["--extra-modules", "a.py", "--extra-modules", "my_pkg.models"])
    argv = [*CONFIG_COMMANDS[command], *modules, "--config-file", "c.yaml", "--extra-modules",
            "b.py", "TRAIN.EPOCH_NUM", "2", "--", "DATA.CLIP_LEN", "-1"]
    ns, rest = parse_only(main, argv)
    assert rest == []
    assert ns.config_file == "c.yaml"
    assert ns.extra_modules == ["a.py", "my_pkg.models", "b.py"]
    assert ns.opts == ["TRAIN.EPOCH_NUM", "2", "DATA.CLIP_LEN", "-1"]


def test_predict_takes_trailing_overrides(tmp_path, capsys):
    from zoo.cli.predict import parse_args

    video = tmp_path / "CLIP.MP4"  # upper case like a key, but an existing file: a video
    video.write_bytes(b"")
    args = parse_args(["--config-file", "c.yaml", "--checkpoint", "m.pth", "--extra-modules",
                       "m.py", "--extra-modules", "n.py", "a.mp4", str(video), "DATA.CLIP_LEN",
                       "8", "--json"])
    assert args.videos == ["a.mp4", str(video)] and args.opts == ["DATA.CLIP_LEN", "8"]
    assert args.extra_modules == ["m.py", "n.py"] and args.json
    assert "deprecated" not in capsys.readouterr().err
    # The old spelling still works, with a warning.
    args = parse_args(["--config-file", "c.yaml", "--checkpoint", "m.pth", "a.mp4",
                       "--opts", "DATA.CLIP_LEN", "8"])
    assert args.videos == ["a.mp4"] and args.opts == ["DATA.CLIP_LEN", "8"]
    assert "--opts is deprecated" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # overrides but no video
        parse_args(["--config-file", "c.yaml", "--checkpoint", "m.pth", "DATA.CLIP_LEN", "8"])
    assert e.value.code == 2
    # A flag between the videos and the overrides, as the usage line shows it.
    args = parse_args(["--checkpoint", "m.pth", "a.mp4", "--json", "b.mp4", "DATA.CLIP_LEN",
                       "-1"])
    assert args.videos == ["a.mp4", "b.mp4"] and args.opts == ["DATA.CLIP_LEN", "-1"]
    assert args.json
    with pytest.raises(SystemExit):
        parse_args(["--checkpoint", "m.pth", "a.mp4", "--jsn"])
    assert "unrecognized arguments: --jsn" in capsys.readouterr().err


def test_predict_reads_the_videos_of_a_folder_and_stops_on_one_without_any(tmp_path, capsys):
    from zoo.cli.predict import parse_args, videos_of
    from zoo.utils.errors import UsageError

    for name in ("b/2.MTS", "b/1.mp4", "a.webm", "notes.txt", ".hidden/x.mp4", "b/._1.mp4"):
        (tmp_path / "v" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "v" / name).write_bytes(b"")
    (tmp_path / "empty").mkdir()
    args = parse_args(["--checkpoint", "m.pth", str(tmp_path / "v"), "one.mp4", "DATA.CLIP_LEN",
                       "8"])
    folder = str(tmp_path / "v")
    assert args.videos == [folder, "one.mp4"]  # read once the checkpoint says videos or images
    assert videos_of(args.videos) == [
        os.path.join(folder, "a.webm"), os.path.join(folder, "b", "1.mp4"),
        os.path.join(folder, "b", "2.MTS"), "one.mp4"]
    assert args.opts == ["DATA.CLIP_LEN", "8"]
    said = capsys.readouterr().err  # the files of the folder it does not read, once
    assert f"{folder}: 1 file(s) passed over, not of a video extension (e.g. notes.txt)" in said
    with pytest.raises(UsageError, match="the folder .*empty' holds no video file"):
        videos_of([str(tmp_path / "empty")])
    args = parse_args(["--checkpoint", "m.pth", "one.mp4", "--window", "2", "--stride", "1"])
    assert (args.window, args.stride) == (2.0, 1.0)
    for wrong in (["--stride", "1"], ["--window", "-2"], ["--topk", "0"]):
        with pytest.raises(SystemExit) as e:
            parse_args(["--checkpoint", "m.pth", "one.mp4", *wrong])
        assert e.value.code == 2


def test_prediction_reports_an_unreadable_video_and_stops_on_a_bug(monkeypatch):
    from zoo.data.decode.base import DecodeError
    from zoo.infer.predictor import Predictor

    predictor = Predictor.__new__(Predictor)  # the scoring loop alone, no checkpoint
    monkeypatch.setattr(os.path, "isfile", lambda path: True)

    def broken(path):
        raise DecodeError(f"{path}: cannot open (not a video PyAV can read)", "open")

    monkeypatch.setattr(predictor, "_views", broken)
    result = predictor.predict(["x.mp4"])
    assert result == [{"video": "x.mp4", "error": "x.mp4: cannot open (not a video PyAV can "
                                                  "read)"}]

    def bug(path):
        raise TypeError("unsupported operand type(s)")

    monkeypatch.setattr(predictor, "_views", bug)
    with pytest.raises(TypeError):  # a bug is not reported as a bad video
        predictor.predict(["x.mp4"])


def test_predict_without_a_config_needs_one_recorded_in_the_checkpoint(tmp_path):
    import torch

    from zoo.cli.predict import recorded_config
    from zoo.utils.errors import UsageError

    torch.save({"model": {}, "cfg": "CONFIG:\n  DATA:\n    CLIP_LEN: 4\n"}, tmp_path / "run.pth")
    path = recorded_config(str(tmp_path / "run.pth"), str(tmp_path))
    assert open(path, encoding="utf-8").read().endswith("CLIP_LEN: 4\n")
    torch.save({"state_dict": {}}, tmp_path / "published.pth")
    with pytest.raises(UsageError, match="records no config .* give the run's config with "
                                         "--config-file"):
        recorded_config(str(tmp_path / "published.pth"), str(tmp_path))


def _readme_commands():
    """``python tools/X.py ...`` / ``python datasets/X.py ...`` commands of README.md, from its
    code blocks and inline code, continuation lines joined, ``[--flag]`` read as ``--flag``."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    spans = re.findall(r"```\w*\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
    commands = []
    for span in spans:
        for part in re.split(r"&&|\n", span.replace("\\\n", " ")):
            part = part.strip().replace("[", "").replace("]", "")
            if re.match(r"python (tools|datasets)/\w+\.py", part):
                commands.append(shlex.split(part)[1:])
    return commands


def test_readme_commands_parse(parse_only):
    commands = _readme_commands()
    assert len(commands) >= 10
    for script, *argv in commands:
        main = _load_wrapper(os.path.join(ROOT, script)).main
        ns, rest = parse_only(main, argv)
        assert rest == [], (script, argv)
        if "--config-file" in argv:
            assert ns.config_file == argv[argv.index("--config-file") + 1]
            assert os.path.isfile(os.path.join(ROOT, ns.config_file)) or "/" not in ns.config_file


# Each command with an input it cannot use (every path below is missing), and the exit code it
# must end with: 2 for a config or usage error, 1 for any other user error.
def _bad_inputs(tmp: str) -> dict:
    missing = os.path.join(tmp, "missing")
    yaml = missing + ".yaml"
    return {
        "zoo-train": (["--config-file", yaml], 2),
        "zoo-test": (["--config-file", yaml], 2),
        "zoo-predict": (["--config-file", yaml, "--checkpoint", "m.pth", "a.mp4"], 2),
        "zoo-extract-features": (["--config-file", yaml], 2),
        "zoo-doctor": (["--config-file", yaml, "--local"], 2),
        "zoo-list-models": (["no_such_model_anywhere"], 1),
        "zoo-convert-checkpoint": (["--from", "pyslowfast", "--model", "resnet50",
                                    missing + ".pyth", os.path.join(tmp, "out.pth")], 1),
        "zoo-convert-config": (["--from", "pyslowfast", yaml, os.path.join(tmp, "out.yaml")], 2),
        "zoo-export": (["--model", "no_such_model_anywhere", "--out", tmp], 1),
        "zoo-plot-log": ([missing], 1),
        "zoo-benchmark": (["no_such_benchmark"], 2),
        "zoo-benchmark-data": (["--no-such-flag"], 2),
        "zoo-build-lists-from-folders": (["--root", missing, "--out", tmp], 2),
        "zoo-build-kinetics-lists": (["--csv", missing + ".csv", "--videos", tmp, "--out", tmp],
                                     1),
        "zoo-build-split-lists": (["ucf101", "--splits", missing, "--out", tmp], 1),
        "zoo-reencode": (["--src", tmp, "--dst", os.path.join(tmp, "256"), "--list",
                          missing + ".txt"], 1),
    }


@pytest.mark.parametrize("command", sorted(ENTRY_POINTS))
def test_every_command_ends_a_bad_input_with_one_error_line(command, tmp_path, capsys):
    bad = _bad_inputs(str(tmp_path))
    assert set(bad) == set(ENTRY_POINTS), "give each command in [project.scripts] a bad input"
    argv, want = bad[command]
    try:
        code = _resolve(ENTRY_POINTS[command])(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    out, err = capsys.readouterr()
    errors = [ln for ln in (out + err).splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith("error: "), out + err
    assert "unexpected" not in errors[0] and "Traceback" not in out + err, errors[0]
    assert code == want, (code, errors[0])


@pytest.mark.parametrize("module", ["zoo.cli.train", "zoo.cli.test", "zoo.cli.predict",
                                    "zoo.cli.parser"])
def test_importing_a_command_leaves_the_trainer_and_the_launcher_out(module):
    # In a fresh interpreter: this one has imported everything already.
    heavy = ("torch.distributed", "zoo.train.trainer", "zoo.launch.launch")
    code = (f"import sys, {module}; "
            f"print(' '.join(m for m in {heavy!r} if m in sys.modules) or 'none')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        ROOT, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "none", f"importing {module} imported {r.stdout.strip()}"


@pytest.mark.parametrize("order", ["kwargs-first", "kwargs-between", "kwargs-last"])
def test_convert_checkpoint_reads_its_paths_wherever_kwargs_stand(order, monkeypatch, capsys):
    """The help's order, ``--kwargs KEY VALUE ... IN OUT``, where argparse's ``nargs="+"`` takes
    the two paths as well, and the others."""
    import types

    import zoo.cli.convert_checkpoint as cli

    seen = {}

    def convert(src, out, scheme, model, kwargs, allow_pickle):
        seen.update(src=src, out=out, kwargs=kwargs)
        return types.SimpleNamespace(num_target=1)

    monkeypatch.setattr(cli, "convert_checkpoint", convert)
    head = ["--from", "mmaction2", "--model", "slowfast_4x16_resnet50"]
    pairs = ["--kwargs", "fuse_norm_act", "False", "width", "8"]
    argv = {"kwargs-first": [*head, *pairs, "in.pth", "out.pth"],
            "kwargs-between": [*head, "in.pth", *pairs, "out.pth"],
            "kwargs-last": [*head, "in.pth", "out.pth", *pairs]}[order]
    assert cli.main(argv) == 0
    assert seen == {"src": "in.pth", "out": "out.pth",
                    "kwargs": {"fuse_norm_act": False, "width": 8}}
    # A path left out is still a usage error that names it.
    with pytest.raises(SystemExit) as e:
        cli.main([*head, *pairs, "in.pth"])
    assert e.value.code == 2 and "required: src, out" in capsys.readouterr().err


def test_ctrl_c_ends_a_command_with_one_line_and_130(capsys):
    from zoo.cli.command import command

    @command
    def main(argv=None):
        raise KeyboardInterrupt

    assert main([]) == 130
    err = capsys.readouterr().err
    assert err.startswith("error: interrupted (Ctrl-C).") and err.count("\n") == 1


def test_a_second_config_file_is_a_usage_error(capsys):
    """Two --config-file flags: the first was dropped without a word."""
    main = _load_wrapper(os.path.join(ROOT, "tools", "train_ddp.py")).main
    with pytest.raises(SystemExit) as e:
        main(["--config-file", "a.yaml", "--config-file", "b.yaml", "--dry-run"])
    assert e.value.code == 2
    assert "--config-file is given twice (a.yaml and b.yaml)" in capsys.readouterr().err


def test_convert_config_refuses_to_write_over_its_input(tmp_path, capsys):
    from zoo.cli import convert_config

    src = tmp_path / "SLOWFAST.yaml"
    src.write_text("TRAIN:\n  ENABLE: True\nMODEL:\n  ARCH: slowfast\n")
    with pytest.raises(SystemExit) as e:
        convert_config.main(["--from", "pyslowfast", str(src), str(src)])
    assert e.value.code == 2 and "is the config to convert" in capsys.readouterr().err
    assert src.read_text().startswith("TRAIN:")


def test_flags_after_the_overrides_are_read_as_flags(parse_only):
    """argparse's REMAINDER takes everything after the first override, flags too."""
    main = _load_wrapper(os.path.join(ROOT, "tools", "train_ddp.py")).main
    ns, rest = parse_only(main, ["--config-file", "x.yaml", "TRAIN.EPOCH_NUM", "2", "--dry-run",
                                 "DATA.CLIP_LEN", "8", "--extra-modules", "m.py",
                                 "MODEL.NAME", "resnet18"])
    assert rest == [] and ns.dry_run and ns.extra_modules == ["m.py"]
    assert ns.opts == ["TRAIN.EPOCH_NUM", "2", "DATA.CLIP_LEN", "8", "MODEL.NAME", "resnet18"]
    ns, _ = parse_only(main, ["--config-file", "x.yaml", "--", "TRAIN.EPOCH_NUM", "2"])
    assert not ns.dry_run and ns.opts == ["TRAIN.EPOCH_NUM", "2"]


def test_predict_device_this_machine_lacks_is_a_usage_error(monkeypatch):
    import torch

    from zoo.cli.predict import _device
    from zoo.utils.errors import UsageError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _device("auto") == "cpu" and _device("cpu") == "cpu"
    for name, says in (("cuda", r"has 0 CUDA GPU\(s\) visible"), ("gpu", "is not a device"),
                       ("cuda:1", r"has 0 CUDA GPU"), ("meta", "runs on cpu or cuda")):
        with pytest.raises(UsageError, match=says):
            _device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _device("cuda:1") == "cuda:1"
    with pytest.raises(UsageError, match="give auto or cpu, or cuda:0 to cuda:1"):
        _device("cuda:2")


def test_the_test_dry_run_names_its_checkpoint_and_does_not_resolve_pretrained(tmp_path):
    """Testing reads the checkpoint, never MODEL.PRETRAINED (the file a fine-tune started from
    may be long gone): no warning about it, and the tested file named."""
    from zoo.cli.dry_run import dry_run_file

    save = tmp_path / "run" / "checkpoints"
    save.mkdir(parents=True)
    for n in (1, 2, 10):
        (save / f"epoch_{n}.pth").write_bytes(b"")
    result = dry_run_file(os.path.join(ROOT, "configs", "custom", "slowfast_tiny_finetune.yaml"),
                          ["LOG.BASE_PATH", str(tmp_path), "LOG.EXP_NAME", "run",
                           "MODEL.PRETRAINED", str(tmp_path / "gone.pth")], mode="test")
    assert result.pretrained.endswith("not read by testing (the tested checkpoint holds every "
                                      "weight)")
    assert not any("pretrained" in w for w in result.warnings), result.warnings
    assert f"tested weights: {save / 'epoch_10.pth'} (the newest in its folder)" in result.notes


def test_the_dry_run_names_labels_beyond_num_classes(tmp_path):
    """A real run stops on a training list with labels up to 2 and NUM_CLASSES 2; the dry run
    passed without a word."""
    from zoo.cli.dry_run import dry_run
    from zoo.config import load_config

    (tmp_path / "v").mkdir()
    lst = tmp_path / "train.txt"
    lst.write_text("a.mp4 10 0\nb.mp4 10 1\nc.mp4 10 2\n")
    common = ["MODEL.NAME", "resnet18", "DATA.TRAIN_ANNO_PATH", str(lst),
              "DATA.TRAIN_DATA_PATH", str(tmp_path / "v"), "DATA.VAL_ANNO_PATH", str(lst),
              "DATA.VAL_DATA_PATH", str(tmp_path / "v")]
    warnings = dry_run(load_config(None, [*common, "DATA.NUM_CLASSES", "2"])).warnings
    assert [w for w in warnings if "has labels up to 2 but CONFIG.DATA.NUM_CLASSES = 2: raise "
            "NUM_CLASSES to at least 3" in w], warnings
    warnings = dry_run(load_config(None, [*common, "DATA.NUM_CLASSES", "3"])).warnings
    assert not [w for w in warnings if "labels" in w], warnings
    # NUM_CLASSES 0: the model is checked with the count training will find in the list.
    result = dry_run(load_config(None, [*common, "DATA.NUM_CLASSES", "0"]))
    assert result.num_classes == 3
    assert f"CONFIG.DATA.NUM_CLASSES 0: 3 classes found in {lst}" in result.notes
    # Weights published for another clip: said, not refused; of a file of the user's (whose
    # clip zoo does not know), not said.
    weights = ["MODEL.PRETRAINED", "True", "DATA.NUM_CLASSES", "3"]
    other_clip = ["MODEL.NAME", "r2plus1d_18", "DATA.CLIP_LEN", "32", "DATA.FRAME_RATE", "2",
                  "DATA.CROP_SIZE", "112"]
    result = dry_run(load_config(None, [*common, *weights, *other_clip]))
    assert ("r2plus1d_18's published weights were trained on 16 frames 2 apart at 112 px; this "
            "config trains on CONFIG.DATA.CLIP_LEN 32, FRAME_RATE 2, CROP_SIZE 112"
            ) in result.notes
    (tmp_path / "w.pth").write_bytes(b"")
    own = ["MODEL.PRETRAINED", str(tmp_path / "w.pth"), "DATA.NUM_CLASSES", "3"]
    result = dry_run(load_config(None, [*common, *own, *other_clip]))
    assert not [n for n in result.notes if "published weights" in n], result.notes
    result = dry_run(load_config(None, [*common, *weights, "MODEL.NAME", "r2plus1d_18",
                                        "DATA.CLIP_LEN", "16", "DATA.FRAME_RATE", "2",
                                        "DATA.CROP_SIZE", "112"]))
    assert not [n for n in result.notes if "published weights" in n], result.notes


@pytest.mark.slow
def test_the_tools_keep_c10ds_cpp_warnings_off_the_console(tmp_path):
    """c10 reads TORCH_CPP_LOG_LEVEL when torch is imported, so the tools set it before that:
    otherwise a launcher whose peer dies prints c10d's warnings and stack frames above zoo's
    one-line error."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    script = tmp_path / "peer_gone.py"
    script.write_text(
        "import datetime\n"
        "from zoo.cli.job import run\n"
        "run(lambda cfg: None, 'test', ['--config-file', 'missing.yaml'])\n"
        "import torch.distributed as dist\n"
        "try:\n"
        f"    dist.TCPStore('127.0.0.1', {port}, is_master=False,\n"
        "                  timeout=datetime.timedelta(seconds=3))\n"
        "except Exception:\n"
        "    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    warned = []
    for level in ("WARNING", None):  # the user's own setting wins; zoo's default is ERROR
        if level:
            env["TORCH_CPP_LOG_LEVEL"] = level
        else:
            env.pop("TORCH_CPP_LOG_LEVEL")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env=env, timeout=120)
        assert "error: config file 'missing.yaml' does not exist" in proc.stderr
        # c10d's warning-level line as it retries the connection
        warned.append("retrying" in proc.stderr)
    assert warned == [True, False]


def test_another_nodes_launcher_labels_its_console_lines_with_its_node():
    """Node 1's launcher is no rank: its console lines said "rank0" (the job's rank 0 is on
    node 0)."""
    import io
    import logging

    from zoo.utils.logger import set_console_label, setup_logger

    out = io.StringIO()
    setup_logger(None, 0, name="zoo_label_test", stream=out)
    set_console_label("node1", name="zoo_label_test")
    logging.getLogger("zoo_label_test").info("data check: train list has 16 videos")
    assert " node1] data check: train list has 16 videos" in out.getvalue()
    assert "rank0" not in out.getvalue()


def test_the_doctor_calls_a_refused_connection_a_node_0_not_started():
    """Node 1's view of node 0: a refused connection is a node 0 not started yet (no route is a
    FAIL: tests/test_multinode.py)."""
    import socket

    from zoo.cli.preflight import _local_checks
    from zoo.config import load_config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    cfg = load_config(None, ["DDP_CONFIG.WORLD_SIZE", "2", "DDP_CONFIG.WORLD_RANK", "1",
                             "DDP_CONFIG.AUTO_RANK_MATCH", "False",
                             "DDP_CONFIG.DIST_URL", f"tcp://127.0.0.1:{port}",
                             "DDP_CONFIG.DIST_BACKEND", "gloo"])
    lines = []
    spec = _local_checks(cfg, 1, lambda *line: lines.append(line))
    said = [line for line in lines if line[1] == "rendezvous"]
    assert [line[0] for line in said] == ["info"], lines
    assert "(connection refused); fine if node 0 is not started yet" in said[0][2]
    assert spec is not None and not any("None" in line[2] for line in lines), lines
